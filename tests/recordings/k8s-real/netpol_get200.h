HTTP/1.1 200
Audit-Id: ad59b5ce-33d2-4346-a9e8-4350d4de3e2d
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 35c28c69-ae84-45bf-ac4d-193664372fa7
X-Kubernetes-Pf-Prioritylevel-Uid: 4d1237ae-e0ba-4997-a859-697da3e6b0e6
Date: Sun, 06 Dec 2026 05:25:34 GMT
Content-Length: 1772
Connection: close
