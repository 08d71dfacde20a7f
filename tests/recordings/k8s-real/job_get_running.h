HTTP/1.1 200
Audit-Id: 7088c5f5-4e27-4764-9d9c-55fee7992d8a
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:41 GMT
Connection: close
Transfer-Encoding: chunked
