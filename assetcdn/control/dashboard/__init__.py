"""The dashboard web UI: one page (`index.html`) and its ES modules, style sheet and vendored hls.js
under `static/`, served by control at /dashboard/ (edges forward /dashboard to it). No build step:
the browser loads the files as they are. `assetcdn.control.routes.dashboard` serves them; `status` builds the
health report the dashboard shows."""
