//! Routes through the attribute at their edges: a caller's model whose bulkhead the route
//! itself holds a place in, a token gate judged by the attempt's `rate_cost`, and a route
//! expression whose generic list holds a comma. On the paused clock.

/// The route's own place in the caller's model's bulkhead does not make that model look full.
mod own_bulkhead_place {
    use std::sync::Mutex;

    use resil::{resilient, Rejected, Transient};

    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
    enum LlmError {
        #[error("overloaded")]
        #[transient]
        Overloaded,
        #[error(transparent)]
        #[transient(transparent)]
        Rejected(#[from] Rejected),
    }

    #[derive(Default)]
    struct Client {
        calls: Mutex<Vec<String>>,
    }

    impl Client {
        fn answer(&self, model: &str) -> Result<String, LlmError> {
            self.calls.lock().unwrap().push(model.to_owned());
            if model == "gpt-4o" {
                Err(LlmError::Overloaded)
            } else {
                Ok(format!("{model} answered"))
            }
        }

        /// An argument taken `mut` by value: the body changes its copy.
        #[resilient(retry = 2, route = model in ["claude-sonnet"])]
        async fn complete_mut(&self, mut model: String) -> Result<String, LlmError> {
            model.push_str("");
            self.answer(&model)
        }

        /// A fallback after a route gets the caller's value.
        #[resilient(retry = 1, route = model in ["claude-sonnet"], fallback = Self::cached)]
        async fn complete_or_cached(&self, model: &str) -> Result<String, LlmError> {
            let _ = self.answer(model);
            Err(LlmError::Overloaded)
        }

        async fn cached(&self, model: &str) -> Result<String, LlmError> {
            Ok(format!("cached for {model}"))
        }

        /// A per-model bulkhead of 1, nothing else in flight: the caller's model must be called.
        #[resilient(retry = 2, key = model, bulkhead = "1 per key", route = model in ["claude-sonnet"])]
        async fn complete_bulkhead(&self, model: &str) -> Result<String, LlmError> {
            self.answer(model)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_mut_routed_argument_moves_on() {
        let client = Client::default();
        assert_eq!(
            client.complete_mut("gpt-4o".to_owned()).await,
            Ok("claude-sonnet answered".to_owned())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_fallback_gets_the_callers_value() {
        let client = Client::default();
        assert_eq!(
            client.complete_or_cached("gpt-4o").await,
            Ok("cached for gpt-4o".to_owned())
        );
        assert_eq!(*client.calls.lock().unwrap(), ["gpt-4o", "claude-sonnet"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_caller_model_with_a_per_model_bulkhead_of_one_is_called() {
        let client = Client::default();
        assert_eq!(
            client.complete_bulkhead("claude-sonnet").await,
            Ok("claude-sonnet answered".to_owned())
        );
        assert_eq!(*client.calls.lock().unwrap(), ["claude-sonnet"]);
    }
}

/// The targets' token gates are judged with what the attempt costs, set before the route
/// chooses.
mod token_cost {
    use resil::{resilient, Rejected, Transient};

    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
    enum LlmError {
        #[error(transparent)]
        #[transient(transparent)]
        Rejected(#[from] Rejected),
    }

    #[resilient(retry = 2, deadline = "5s", key = model, token_rate = "1000/min per key",
                rate_cost = tokens, route = model in ["claude-sonnet"])]
    async fn complete(model: &str, tokens: u64) -> Result<String, LlmError> {
        let _ = tokens;
        Ok(format!("{model} answered"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_target_whose_token_gate_cannot_take_the_attempts_cost_is_skipped() {
        // gpt-4o's minute of tokens is spent.
        assert_eq!(
            complete("gpt-4o", 1000).await,
            Ok("gpt-4o answered".to_owned())
        );
        // Its next 1000 tokens are a minute away, past the 5 s deadline: claude-sonnet serves.
        assert_eq!(
            complete("gpt-4o", 1000).await,
            Ok("claude-sonnet answered".to_owned())
        );
    }
}

/// `route = ARG in EXPR` takes any expression: a comma inside a generic list stays in it.
mod generic_list {
    use std::collections::BTreeMap;

    use resil::{resilient, Rejected, Transient};

    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
    enum LlmError {
        #[error("overloaded")]
        #[transient]
        Overloaded,
        #[error(transparent)]
        #[transient(transparent)]
        Rejected(#[from] Rejected),
    }

    #[resilient(retry = 2, route = model in BTreeMap::<&'static str, u8>::from([("claude-sonnet", 1)]).into_keys())]
    async fn complete(model: &str) -> Result<String, LlmError> {
        match model {
            "gpt-4o" => Err(LlmError::Overloaded),
            _ => Ok(format!("{model} answered")),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_route_expression_with_a_generic_list_parses() {
        assert_eq!(
            complete("gpt-4o").await,
            Ok("claude-sonnet answered".to_owned())
        );
    }
}
