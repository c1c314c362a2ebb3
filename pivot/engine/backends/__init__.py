"""The production engines behind `pivot.engine.protocol.InferenceEngine`: vLLM (vllm_adapter,
its engine arguments in vllm_build, its in-place weight reload in vllm_weights) and sglang
(sglang_adapter, its weight push in sglang_weights), with the request bookkeeping both keep
(live_requests). Each imports its engine's package only when an engine is built
(`pivot.engine.factory.build_engine`)."""
