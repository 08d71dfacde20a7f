HTTP/1.1 200
Audit-Id: 4bc1d233-778f-4dfe-bd41-e9012fdd4ee1
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:16 GMT
Connection: close
Transfer-Encoding: chunked
