//! Dynamo 1.6.1 wire types: OpenAI-compatible completions with nvext, and the selection service's JSON.
