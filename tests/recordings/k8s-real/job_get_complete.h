HTTP/1.1 200
Audit-Id: 773f636a-57e9-464d-b1bf-7d03fdfb14f7
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:10 GMT
Connection: close
Transfer-Encoding: chunked
