HTTP/1.1 404
Audit-Id: 1c5f4c28-322e-4488-95a5-2d0ce345a804
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 35c28c69-ae84-45bf-ac4d-193664372fa7
X-Kubernetes-Pf-Prioritylevel-Uid: 4d1237ae-e0ba-4997-a859-697da3e6b0e6
Date: Sun, 06 Dec 2026 05:25:34 GMT
Content-Length: 256
Connection: close
