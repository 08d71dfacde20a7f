HTTP/1.1 422
Audit-Id: 656df03c-716a-4380-a41f-b9e59aa76315
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 96a522a7-9ed9-44d2-b508-fbdec194a63c
X-Kubernetes-Pf-Prioritylevel-Uid: 88ec6c06-a93b-495f-9461-59a09dc066bd
Date: Sun, 06 Dec 2026 14:33:43 GMT
Content-Length: 624
Connection: close
