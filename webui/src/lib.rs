//! `quarry-webui`: the browser side of the appliance.
//!
//! Holds the server-rendered templates (askama) and the static assets (CSS, a small
//! amount of JavaScript, icons) that the `quarry` binary embeds and serves under `/`.
//! Nothing is fetched from a CDN: appliances run offline. The pages are built on the
//! REST API's data and work before any script loads; browser tests (playwright-core
//! driving Debian's chromium) live beside them.
//!
//! Not built yet: the web UI is its own issue (telemetry and the web UI). Until it lands,
//! the REST API under `/api/v1` is the management interface.
