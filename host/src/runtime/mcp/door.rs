//! One run's MCP server, on the official Rust SDK (`rmcp`): `tools/list` answers the
//! scenario's declared tools; `tools/call` hands the call to the run's turn thread and waits
//! for its outcome. Nothing here executes a tool or touches a world.

use std::sync::{Arc, Weak};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{MAX_REQUEST_BYTES, RunSlot, ToolOutcome, ToolRequest};

pub(super) type Service = StreamableHttpService<WorldDoor, LocalSessionManager>;

/// JSON-RPC error code of a call that was not executed (no turn in progress, run ended).
const REFUSED: ErrorCode = ErrorCode(-32001);

/// A fresh MCP service for one run: its own session manager, so sessions never cross runs;
/// cancelling `ended` closes every session and stream it holds.
pub(super) fn service(slot: Weak<RunSlot>, ended: CancellationToken) -> Service {
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(MAX_REQUEST_BYTES)
        .with_cancellation_token(ended);
    // Loopback only; the listener is bound to 127.0.0.1, and the Host check stays on.
    config.allowed_hosts = vec!["127.0.0.1".into(), "localhost".into()];
    // Each answer in one JSON body (`Content-Length`), not an SSE stream: a client gets its
    // whole answer and keeps its connection. With SSE answers, the official Python client
    // closed the stream with its answer in hand, before the body ended, and so dropped its
    // connection: a new TCP connection per tool call (195 sockets in TIME-WAIT after 200
    // calls; 2 now). Sessions stay: each run's service has its own.
    config.json_response = true;
    StreamableHttpService::new(
        move || Ok(WorldDoor { slot: slot.clone() }),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The handler of one MCP session (or one stateless request) of a run.
pub(super) struct WorldDoor {
    slot: Weak<RunSlot>,
}

fn refused(why: impl Into<String>) -> ErrorData {
    ErrorData::new(REFUSED, why.into(), None)
}

impl ServerHandler for WorldDoor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("wt", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The fixture world of one Wind Tunnel run. Tools act on this run's world only, \
                 and only while one of its turns is in progress.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let slot = self
            .slot
            .upgrade()
            .ok_or_else(|| refused("the run has ended"))?;
        Ok(ListToolsResult::with_all_items(
            slot.tools.listing().to_vec(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let slot = self
            .slot
            .upgrade()
            .ok_or_else(|| refused("refused: the run has ended"))?;
        let (tx, rx) = oneshot::channel();
        let name = request.name.into_owned();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let req = ToolRequest {
            name: name.clone(),
            arguments: arguments.clone(),
            respond: tx,
        };
        if slot.deliver(req).is_err() {
            let why = "refused: no turn of this run is in progress (tools act only during a turn)";
            // Evidence of what the agent tried, though it never ran.
            slot.record_refused(name, arguments, why);
            return Err(refused(why));
        }
        let ended = slot.ended.clone();
        // The slot is not held while waiting: a run that ends drops it, which drops the
        // queued request and with it `tx`.
        drop(slot);
        let outcome = tokio::select! {
            o = rx => o.unwrap_or_else(|_| ToolOutcome::Refused("refused: the turn ended before the call ran".into())),
            _ = ended.cancelled() => ToolOutcome::Refused("refused: the run ended before the call ran".into()),
        };
        if let ToolOutcome::Refused(why) = &outcome
            && let Some(slot) = self.slot.upgrade()
        {
            slot.record_refused(name, arguments, why);
        }
        match outcome {
            ToolOutcome::Done(v) => {
                Ok(CallToolResult::success(vec![ContentBlock::text(v.to_string())]).into())
            }
            ToolOutcome::Failed(why) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into())
            }
            ToolOutcome::Unknown(why) => Err(ErrorData::invalid_params(why, None)),
            ToolOutcome::Refused(why) => Err(refused(why)),
        }
    }
}
