HTTP/1.1 404
Audit-Id: f5d97302-1b9e-4a58-9b31-4ef9cd8fc852
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: db8c7c7e-9002-41c2-98e4-b69dbe961756
X-Kubernetes-Pf-Prioritylevel-Uid: b37e0b74-52f5-4df8-936c-6518cac3a90d
Date: Sun, 06 Dec 2026 08:09:11 GMT
Content-Length: 198
Connection: close
