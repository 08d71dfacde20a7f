HTTP/1.1 403
Audit-Id: 0e7c6729-05fb-46ae-a0a2-cdf85b8936e2
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 35c28c69-ae84-45bf-ac4d-193664372fa7
X-Kubernetes-Pf-Prioritylevel-Uid: 4d1237ae-e0ba-4997-a859-697da3e6b0e6
Date: Sun, 06 Dec 2026 05:25:34 GMT
Content-Length: 237
Connection: close
