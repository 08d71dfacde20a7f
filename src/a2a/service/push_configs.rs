//! The push-config methods (§3.1.7-3.1.10): webhooks set, read, listed and deleted per task,
//! only on the caller's own tasks.

use serde::Serialize;
use serde_json::{Map, Value};

use super::super::decode::{field, push_config, required_string};
use super::super::types::RpcError;
use super::Service;
use crate::control::Caller;
use crate::push::PushConfig;

impl Service {
    /// `CreateTaskPushNotificationConfig` (§3.1.7): a webhook for a task still running. The
    /// request is a `TaskPushNotificationConfig` (the v0.3 form, its fields under
    /// `pushNotificationConfig`, is read too).
    pub fn push_create(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfig, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        self.running_task(caller, &task_id)?;
        let fields = match field(
            params,
            &["pushNotificationConfig", "push_notification_config"],
        ) {
            Some(Value::Object(inner)) => inner,
            _ => params,
        };
        let config = push_config(fields, &task_id)?;
        self.push
            .create(config)
            .map_err(|e| RpcError::invalid_params(e.to_string()))
    }

    /// `GetTaskPushNotificationConfig` (§3.1.8).
    pub fn push_get(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfig, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        let id = required_string(params, &["id"], "id")?;
        self.known_task(caller, &task_id)?;
        self.push.get(&task_id, &id).ok_or_else(|| {
            RpcError::task_not_found(&task_id).with("pushNotificationConfigId", id.clone())
        })
    }

    /// `ListTaskPushNotificationConfigs` (§3.1.9): all of a task's configs, one page.
    pub fn push_list(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfigs, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        self.known_task(caller, &task_id)?;
        Ok(PushConfigs {
            configs: self.push.list(&task_id),
            next_page_token: String::new(),
        })
    }

    /// `DeleteTaskPushNotificationConfig` (§3.1.10): idempotent.
    pub fn push_delete(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<Empty, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        let id = required_string(params, &["id"], "id")?;
        self.known_task(caller, &task_id)?;
        self.push.delete(&task_id, &id);
        Ok(Empty {})
    }
}

/// `ListTaskPushNotificationConfigs`' answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfigs {
    pub configs: Vec<PushConfig>,
    pub next_page_token: String,
}

/// `google.protobuf.Empty`.
#[derive(Serialize)]
pub struct Empty {}
