//! The Kubernetes backend (k3s or any conformant cluster): one pod per task, owned by its
//! labels. Being built in steps (issue 8): this step has the worker pod (`pod`); the API
//! client and the `Backend` implementation come next, and until they do `build_backend`
//! refuses `BACKEND=k8s` with one clear line.

pub(crate) mod pod;
