HTTP/1.1 409
Audit-Id: 956927f6-2cbe-4fe4-9d6a-d1fb87cbbbd1
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 96a522a7-9ed9-44d2-b508-fbdec194a63c
X-Kubernetes-Pf-Prioritylevel-Uid: 88ec6c06-a93b-495f-9461-59a09dc066bd
Date: Sun, 06 Dec 2026 14:33:42 GMT
Content-Length: 208
Connection: close
