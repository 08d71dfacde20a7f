HTTP/1.1 201
Audit-Id: 40c719cc-b312-4562-bc7d-50895375d663
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 69c21f4d-7acc-40b3-838b-0ec80c8262de
X-Kubernetes-Pf-Prioritylevel-Uid: ee439018-525b-48b7-b091-6af37abcd127
Date: Sun, 06 Dec 2026 14:33:13 GMT
Content-Length: 1016
Connection: close
