HTTP/1.1 200
Audit-Id: 6debaa78-800b-4c36-a066-90749f6d1213
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:48 GMT
Connection: close
Transfer-Encoding: chunked
