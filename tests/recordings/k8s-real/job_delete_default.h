HTTP/1.1 200
Audit-Id: a67ec9dd-cb45-4996-934b-a7cb76e42ca1
Cache-Control: no-cache, private
Content-Type: application/json
Warning: 299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning"
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:44 GMT
Connection: close
Transfer-Encoding: chunked
