HTTP/1.1 201
Audit-Id: 31a1483f-17c1-4181-9191-76e9dfebb43b
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 57df4fc2-8153-4b01-92d5-95e11bdaffaf
X-Kubernetes-Pf-Prioritylevel-Uid: 19f72e82-744b-4c91-8f01-13011eac3825
Date: Sun, 06 Dec 2026 14:07:16 GMT
Content-Length: 847
Connection: close
