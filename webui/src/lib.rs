//! `quarry-webui`: the browser side of the appliance.
//!
//! Holds the server-rendered templates (askama, in `templates/`) and the static assets
//! (one CSS file, one small JavaScript file in `static/`) that the `quarry` binary embeds
//! and serves under `/` and `/ui/`. Nothing is fetched from a CDN: appliances run
//! offline. The page structs here are plain view models (strings and numbers, already
//! formatted): the appliance's `ui` module fills them from the same REST handlers the API
//! uses, so this crate knows nothing of the database or HTTP. Every page works before any
//! script loads; the script only refreshes figures (dashboard chart, usage bars) live.
//! The browser acceptance test (playwright-core driving Debian's chromium) is
//! `tests/webui/` run by `tests/suites/webui.sh`.

// Nothing an admin, a client or the kernel hands us may panic the appliance: no index or
// slice that can fall outside its buffer (tests are exempt, clippy.toml).
#![deny(clippy::indexing_slicing)]

pub mod format;
pub mod pages;

pub use askama::Template;
pub use format::{chart_points, downsample, human_bytes, parse_size};

/// The stylesheet served at `/ui/static/app.css`.
pub const APP_CSS: &str = include_str!("../static/app.css");
/// The script served at `/ui/static/app.js`.
pub const APP_JS: &str = include_str!("../static/app.js");
