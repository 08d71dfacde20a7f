HTTP/1.1 201
Audit-Id: 2db306e6-ab1e-4c5b-b582-6898dcb0815b
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:08 GMT
Connection: close
Transfer-Encoding: chunked
