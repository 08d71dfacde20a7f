HTTP/1.1 200
Audit-Id: c6b13f3b-2638-4bd5-a212-0a54ec935392
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:42 GMT
Content-Length: 176
Connection: close
