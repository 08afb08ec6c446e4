// The management API as the dashboard calls it: same origin, with the session cookie (HttpOnly,
// SameSite=Strict; the browser sends it and an Origin header, which control checks on every change).

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }

  /** Standard envelope `error.details` (e.g. the rules editor's [{line, message}]). */
  get details() {
    const error = this.body && this.body.error;
    return error && typeof error === "object" && Array.isArray(error.details) ? error.details : [];
  }

  /** Legacy envelope `invalid` (purge: the offending URLs or tags). */
  get invalid() {
    return (this.body && Array.isArray(this.body.invalid)) ? this.body.invalid : [];
  }
}

/** The human message of either error envelope (standard `error.message`, legacy `error` string). */
export function messageOf(body, fallback) {
  if (body && typeof body === "object") {
    if (body.error && typeof body.error === "object" && body.error.message) return body.error.message;
    if (typeof body.error === "string") return body.message && body.message !== body.error ? `${body.error}: ${body.message}` : body.error;
    if (body.Message) return body.Message;
    if (body.message) return body.message;
  }
  return fallback;
}

function signedOut() {
  // The session ended (expired or signed out elsewhere): back to the sign-in page.
  location.assign("/dashboard/login");
}

function query(params) {
  if (!params) return "";
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function api(method, path, { json, params, signal } = {}) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" }, signal };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  }
  const response = await fetch(path + query(params), init);
  let body = null;
  const type = response.headers.get("Content-Type") || "";
  if (response.status !== 204) {
    body = type.includes("json") ? await response.json().catch(() => null) : await response.text();
  }
  if (response.status === 401) {
    signedOut();
    throw new ApiError(401, "Your session has ended. Sign in again.", body);
  }
  if (!response.ok) {
    throw new ApiError(response.status, messageOf(body, `${response.status} ${response.statusText}`), body);
  }
  return body;
}

export const get = (path, params, options) => api("GET", path, { ...options, params });
export const post = (path, json, params) => api("POST", path, { json, params });
export const del = (path, params) => api("DELETE", path, { params });
export const put = (path, json, params) => api("PUT", path, { json, params });

// --- storage --------------------------------------------------------------------------------
/**
 * `/api/storage/<path>` with each segment percent-encoded (names may hold spaces). A `.` or `..` segment is refused
 * here: the browser resolves it (encoded too) before sending, so the request would name another folder.
 */
export function storageUrl(path) {
  return "/api/storage/" + path.split("/").map((p) => {
    if (p === "." || p === "..") throw new Error(`A file or folder cannot be named "${p}".`);
    return encodeURIComponent(p);
  }).join("/");
}

/** The CDN path of a storage entry: `clients/<zone>/...` is served as `/<zone>/...`. */
export function cdnPath(repoPath) {
  const path = repoPath.replace(/^\/+/, "");
  return "/" + (path.startsWith("clients/") ? path.slice("clients/".length) : path);
}

export function cdnHref(path) {
  return path.split("/").map((p) => encodeURIComponent(p)).join("/");
}

// Control stores an empty body only with this Checksum (a folder's .gitkeep), so it is sent in any context.
const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

async function sha256Hex(file) {
  if (file.size === 0) return EMPTY_SHA256;
  if (!(globalThis.crypto && crypto.subtle)) return null; // not a secure context: the upload goes without
  const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * PUT a file into storage with XMLHttpRequest, whose upload events give the progress that fetch
 * cannot. The Checksum header (SHA-256) lets control refuse a body damaged on the way.
 * Returns {promise, abort}; onProgress(fraction) is called as bytes leave.
 */
export function upload(path, file, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = (async () => {
    const checksum = await sha256Hex(file);
    return new Promise((resolve, reject) => {
      xhr.open("PUT", storageUrl(path));
      xhr.withCredentials = true;
      xhr.setRequestHeader("Accept", "application/json");
      if (file.type) xhr.setRequestHeader("Content-Type", file.type);
      if (checksum) xhr.setRequestHeader("Checksum", checksum);
      xhr.upload.addEventListener("progress", (event) => {
        if (event.lengthComputable) onProgress(event.loaded / event.total);
      });
      xhr.addEventListener("load", () => {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch { body = xhr.responseText; }
        if (xhr.status === 401) signedOut();
        if (xhr.status >= 200 && xhr.status < 300) { onProgress(1); resolve(body); }
        else reject(new ApiError(xhr.status, messageOf(body, `${xhr.status} ${xhr.statusText}`), body));
      });
      xhr.addEventListener("error", () => reject(new ApiError(0, "The upload failed (network error).", null)));
      xhr.addEventListener("abort", () => reject(new ApiError(0, "The upload was cancelled.", null)));
      xhr.send(file);
    });
  })();
  return { promise, abort: () => xhr.abort() };
}

// --- shared state ---------------------------------------------------------------------------
let statusCache = null;

/** GET /api/dashboard/status, shared by the views for a few seconds. */
export async function status(fresh = false) {
  if (!fresh && statusCache && Date.now() - statusCache.at < 5000) return statusCache.body;
  const body = await get("/api/dashboard/status");
  statusCache = { at: Date.now(), body };
  return body;
}

/** The edges' public base URL (server.public_url): CDN URLs, previews and streams come from there. */
export async function publicUrl() {
  try {
    return (await status()).dashboard.publicUrl.replace(/\/+$/, "");
  } catch {
    return location.origin;
  }
}
