//! How an operation ends: completed with its reply data (and a create's token), rejected
//! before it ran, or failed; the contract's error codes, and the backend's errors mapped onto
//! them.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::backend::{BackendError, WorkerState};
use crate::token::Token;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    WorkerExists,
    NotFound,
    BackendUnavailable,
    ImageNotFound,
    NotReady,
    Capacity,
    RejectedByCluster,
    /// The worker is not in a state the operation applies to (resuming an exited worker,
    /// renewing a suspended one); the message says which state and what to do.
    InvalidState,
    /// The caller may not do this (a worker's own token asking for anything but its renew).
    Forbidden,
    Internal,
}

/// The `{"error": ...}` a failed or rejected task carries in its status message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<WorkerState>,
}

impl ControlError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControlError {
        ControlError {
            code,
            message: message.into(),
            worker_id: None,
            state: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> ControlError {
        ControlError::new(ErrorCode::InvalidRequest, message)
    }
}

impl From<BackendError> for ControlError {
    fn from(e: BackendError) -> ControlError {
        let message = e.to_string();
        match e {
            BackendError::Unavailable(_) => {
                ControlError::new(ErrorCode::BackendUnavailable, message)
            }
            BackendError::WorkerExists { worker_id, state } => ControlError {
                code: ErrorCode::WorkerExists,
                message,
                worker_id: Some(worker_id),
                state: Some(state),
            },
            BackendError::NotFound => ControlError::new(ErrorCode::NotFound, message),
            BackendError::ImageNotFound(_) => ControlError::new(ErrorCode::ImageNotFound, message),
            BackendError::NotReady(_) => ControlError::new(ErrorCode::NotReady, message),
            BackendError::Rejected(_) => ControlError::new(ErrorCode::RejectedByCluster, message),
            BackendError::Capacity(_) => ControlError::new(ErrorCode::Capacity, message),
            BackendError::Refused(_) => ControlError::new(ErrorCode::InvalidState, message),
            BackendError::Internal(_) => ControlError::new(ErrorCode::Internal, message),
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The reply data, and for `create` the worker's token (kept apart so the protocol layer
    /// can deliver it exactly once). The data is JSON text, written once from the backend's
    /// typed answer and sent as it is.
    Completed {
        data: Box<RawValue>,
        token: Option<Token>,
    },
    /// Not attempted: the request was malformed.
    Rejected(ControlError),
    /// Attempted and failed.
    Failed(ControlError),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Rejected(_) => "rejected",
            Outcome::Failed(_) => "failed",
        }
    }
}
