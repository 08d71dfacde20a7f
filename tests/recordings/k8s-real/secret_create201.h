HTTP/1.1 201
Audit-Id: 19040a8f-94c9-4c58-bc9d-67a5d0ef41e1
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: db8c7c7e-9002-41c2-98e4-b69dbe961756
X-Kubernetes-Pf-Prioritylevel-Uid: b37e0b74-52f5-4df8-936c-6518cac3a90d
Date: Sun, 06 Dec 2026 08:09:11 GMT
Content-Length: 801
Connection: close
