//! Writes the documented examples: `data/examples/bundle.json` (a frozen `cache` bundle of
//! plausible parameters) and `data/examples/observations.json` (the proposal's example turn),
//! then prints the decision. Run from the workspace root:
//!
//! ```text
//! cargo run -p sy-selector --example example_bundle -- data/examples
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use sy_selector::Variant;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/examples".to_string());
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    let bundle = common::bundle(Variant::Cache);
    std::fs::write(
        dir.join("bundle.json"),
        bundle.to_json_pretty().unwrap() + "\n",
    )
    .unwrap();
    let input = common::example_input();
    std::fs::write(
        dir.join("observations.json"),
        serde_json::to_string_pretty(&input).unwrap() + "\n",
    )
    .unwrap();
    for variant in Variant::ALL {
        let d = sy_selector::decide(&bundle.params, variant, &input);
        println!("{}", serde_json::to_string(&d).unwrap());
    }
}
