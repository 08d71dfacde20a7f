HTTP/1.1 201
Audit-Id: 3161e047-8bf2-442e-b14f-f1b37f0a5058
Cache-Control: no-cache, private
Content-Type: application/json
Warning: 299 - "would violate PodSecurity \"restricted:latest\": runAsNonRoot != true (pod and container \"copy\" must not set securityContext.runAsNonRoot=false), runAsUser=0 (pod must not set runAsUser=0)"
X-Kubernetes-Pf-Flowschema-Uid: d4130ccd-2207-4579-9dc8-29d7b030530e
X-Kubernetes-Pf-Prioritylevel-Uid: d68900e2-6496-467a-8e89-00081d4dcca4
Date: Sun, 06 Dec 2026 16:45:48 GMT
Connection: close
Transfer-Encoding: chunked
