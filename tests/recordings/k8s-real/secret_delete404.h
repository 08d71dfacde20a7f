HTTP/1.1 404
Audit-Id: 662ff579-9e43-46f4-97d4-33f17fa984c1
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 96a522a7-9ed9-44d2-b508-fbdec194a63c
X-Kubernetes-Pf-Prioritylevel-Uid: 88ec6c06-a93b-495f-9461-59a09dc066bd
Date: Sun, 06 Dec 2026 14:33:42 GMT
Content-Length: 198
Connection: close
