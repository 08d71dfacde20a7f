HTTP/1.1 404
Audit-Id: 3775a6a0-dcb3-4446-bbf8-428d746e4ed8
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:11 GMT
Content-Length: 210
Connection: close
