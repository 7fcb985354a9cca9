//! Dynamo clients: streaming completions with TTFT timing, the selection-service client and the observation adapter.
