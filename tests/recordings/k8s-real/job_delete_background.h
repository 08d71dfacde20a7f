HTTP/1.1 200
Audit-Id: 9ad2ef68-7dad-4be3-b5d0-c0e3ed6c1125
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:10 GMT
Content-Length: 176
Connection: close
