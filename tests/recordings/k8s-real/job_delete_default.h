HTTP/1.1 200
Audit-Id: a7320f44-0e13-47c1-94fa-5173bdaea0c6
Cache-Control: no-cache, private
Content-Type: application/json
Warning: 299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning"
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:12 GMT
Connection: close
Transfer-Encoding: chunked
