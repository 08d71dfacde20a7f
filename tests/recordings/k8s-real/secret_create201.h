HTTP/1.1 201
Audit-Id: effa032c-5b11-4e87-9fee-545ae857118c
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 96a522a7-9ed9-44d2-b508-fbdec194a63c
X-Kubernetes-Pf-Prioritylevel-Uid: 88ec6c06-a93b-495f-9461-59a09dc066bd
Date: Sun, 06 Dec 2026 14:33:42 GMT
Content-Length: 801
Connection: close
