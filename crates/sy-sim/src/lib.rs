//! Embedded Dynamo-compatible simulator: frontend and selection service over loopback HTTP, with a block prefix cache and a stepped scheduler per worker.
