HTTP/1.1 201
Audit-Id: 1f594a49-2734-4104-935b-6354ff65ab9c
Cache-Control: no-cache, private
Content-Type: application/json
X-Kubernetes-Pf-Flowschema-Uid: 69c21f4d-7acc-40b3-838b-0ec80c8262de
X-Kubernetes-Pf-Prioritylevel-Uid: ee439018-525b-48b7-b091-6af37abcd127
Date: Sun, 06 Dec 2026 14:33:13 GMT
Content-Length: 828
Connection: close
