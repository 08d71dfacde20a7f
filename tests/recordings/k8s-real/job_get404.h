HTTP/1.1 404
Audit-Id: 4cc2c14a-dcaa-4f54-98e5-ab96f8310e16
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:43 GMT
Content-Length: 210
Connection: close
