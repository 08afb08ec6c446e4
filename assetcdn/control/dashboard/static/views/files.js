// Files: a zone (or the stock pool) as a file manager over /api/storage: browse, upload (drag and
// drop, with progress), preview images and video (HLS through hls.js), download, copy the CDN URL,
// purge, delete. Public files are previewed from the edges (`base`): the dashboard's own origin
// serves stored files only as downloads (docs/dashboard.md).
import { ApiError, api, cdnHref, cdnPath, del, get, publicUrl, storageUrl, upload } from "../api.js";
import { badge, card, clear, confirmDanger, copyText, dialog, empty, formatBytes, formatDate, h, icon, redraw, toast } from "../ui.js";

export const title = "Files";

const STOCKS = "stocks";
// A stock video's source, or its HLS renditions and index: previewed as the edges' HLS stream.
const VIDEO_SOURCE = /^stocks\/videos\/([^/]+)(?:\.(?:mp4|mov|m4v|webm|mkv)|\/hls\/[^/]+\.(?:json|ts))$/i;
const TEXT_PREVIEW_MAX = 200 * 1024;

function extension(name) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot + 1).toLowerCase() : "";
}

function isImage(entry) {
  return (entry.ContentType || "").startsWith("image/");
}

function isPrivate(repoPath) {
  return /^(clients\/[^/]+\/v1|stocks)\/private\//.test(repoPath);
}

// A private file is read from the dashboard's origin, where it is application/octet-stream: a browser sniffs a raster
// image under that type but never an SVG, so an SVG is shown from a blob of its own type (an <img> runs none of its
// scripts). `img` gets its src, or an error event when the file cannot be read.
function showPrivateImage(img, repoPath, type) {
  if (!/^image\/svg\+xml\b/.test(type || "")) {
    img.src = storageUrl(repoPath);
    return;
  }
  fetch(storageUrl(repoPath), { credentials: "same-origin" })
    .then((response) => (response.ok ? response.blob() : Promise.reject(new Error(`${response.status}`))))
    .then((blob) => {
      const url = URL.createObjectURL(new Blob([blob], { type: "image/svg+xml" }));
      const release = () => URL.revokeObjectURL(url);
      img.addEventListener("load", release, { once: true });
      img.addEventListener("error", release, { once: true });
      img.src = url;
    })
    .catch(() => img.dispatchEvent(new Event("error")));
}

function hashFor(dir, file) {
  const path = dir.split("/").filter(Boolean).map((p) => encodeURIComponent(p)).join("/");
  return `#/files/${path}` + (file ? `?file=${encodeURIComponent(file)}` : "");
}

export async function render(container, { rest, params }) {
  const listed = await get("/api/core/zones").catch(() => null); // null: not read (every root is then tried)
  const zones = listed || [];
  const roots = [...zones.map((z) => z.Name), STOCKS];
  if (!rest.length || !rest[0]) {
    if (!zones.length) {
      container.append(card("Files", null, empty("No zone yet."), h("p", null, h("a", { href: "#/zones" }, "Create a zone"), " to upload files.")));
      return undefined;
    }
    location.replace(hashFor(`${zones[0].Name}/v1`));
    return undefined;
  }
  const dir = rest.filter(Boolean).join("/");
  const root = rest[0];
  const selectedName = params.get("file");
  const base = await publicUrl();
  let player = null;

  // --- header: zone picker, breadcrumbs, actions ---------------------------------------------
  const picker = h("select#zone-picker", { "aria-label": "Zone", onchange: () => location.assign(hashFor(picker.value === STOCKS ? STOCKS : `${picker.value}/v1`)) },
    roots.map((name) => h("option", { value: name, selected: name === root }, name === STOCKS ? "stocks (shared pool)" : name)));
  if (listed && !roots.includes(root)) {
    // A zone deleted since the link was kept, or mistyped: said so, with no zone selected and nothing to upload into.
    picker.prepend(h("option", { value: "", selected: true, disabled: true }, "No such zone"));
    container.append(card("Files", [picker], h("div.notice.error#no-zone", null, `There is no zone named ${root}. Choose one above, or `,
      h("a", { href: "#/zones" }, "see the zones"), ".")));
    return undefined;
  }
  const crumbs = h("nav.breadcrumbs", { "aria-label": "Path" });
  const parts = dir.split("/");
  parts.forEach((part, i) => {
    if (i) crumbs.append(h("span.sep", null, "/"));
    crumbs.append(i === parts.length - 1 ? h("b", null, part) : h("a", { href: hashFor(parts.slice(0, i + 1).join("/")) }, part));
  });
  const fileInput = h("input#file-input.hidden", { type: "file", multiple: true, onchange: () => { startUploads([...fileInput.files]); fileInput.value = ""; } });
  // A pull zone's paths are its origin's: the API refuses uploads into it (409 PullZone), and what is stored in it
  // (from before it pulled) is kept, not served, until the origin is removed.
  const pulling = zones.find((z) => z.Name === root && z.Kind === "pull");
  const tools = [
    picker,
    h("button", { type: "button", onclick: () => newFolder(), disabled: !!pulling }, "New folder"),
    h("button.primary#upload-button", { type: "button", onclick: () => fileInput.click(), disabled: !!pulling }, "Upload files"),
    fileInput,
  ];

  const listing = h("div.table-wrap#file-list");
  const uploads = h("div.uploads#uploads");
  const browser = h("div.card.flush.dropzone#dropzone", null,
    h("div.card-head", null, crumbs, h("div.row", null, tools)),
    pulling
      ? h("div.notice#pull-notice", { style: "margin: 0 18px 12px" }, `${root} is a pull zone: its paths are fetched from `,
        h("b", null, pulling.Origin.Url), ". Files cannot be uploaded into it; those stored before it pulled are kept but not served. ",
        h("a", { href: "#/zones" }, "Remove the origin"), " to serve them again.")
      : h("p.muted.small", { style: "padding: 0 18px" }, "Drag files here to upload them into this folder."),
    h("div", { style: "padding: 0 18px" }, uploads),
    listing);
  const preview = h("div.card#preview", null, empty("Select a file to preview it."));
  container.append(h("div.files-layout", null, browser, preview));

  // --- drag and drop ---------------------------------------------------------------------------
  let depth = 0;
  browser.addEventListener("dragenter", (event) => { event.preventDefault(); depth += 1; browser.classList.add("dragging"); });
  browser.addEventListener("dragover", (event) => { event.preventDefault(); event.dataTransfer.dropEffect = "copy"; });
  browser.addEventListener("dragleave", () => { depth -= 1; if (depth <= 0) { depth = 0; browser.classList.remove("dragging"); } });
  browser.addEventListener("drop", (event) => {
    event.preventDefault();
    depth = 0;
    browser.classList.remove("dragging");
    const dropped = [...(event.dataTransfer.files || [])];
    if (pulling) {
      if (dropped.length) toast(`${root} is a pull zone: files cannot be uploaded into it.`, "error");
      return;
    }
    if (dropped.length) startUploads(dropped);
  });

  // --- listing -------------------------------------------------------------------------------
  let entries = [];

  async function load() {
    try {
      entries = await get(storageUrl(`${dir}/`));
    } catch (error) {
      redraw(listing, h("div.notice.error", { style: "margin: 0 18px 18px" },
        error.status === 404 ? `${dir}/ does not exist yet. Upload a file to create it.` : error.message));
      entries = [];
      return;
    }
    entries.sort((a, b) => (b.IsDirectory - a.IsDirectory) || a.ObjectName.localeCompare(b.ObjectName));
    if (!entries.length) {
      redraw(listing, empty("This folder is empty. Drop files here."));
      return;
    }
    redraw(listing, h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th.num", null, "Size"), h("th", null, "Type"), h("th", null, "Modified"), h("th"))),
      h("tbody", null, entries.map(row))));
    const chosen = selectedName && entries.find((e) => !e.IsDirectory && e.ObjectName === selectedName);
    if (chosen) showPreview(chosen);
  }

  function repoPathOf(entry) {
    return (entry.Path + entry.ObjectName).replace(/^\/+/, "");
  }

  function thumb(entry) {
    if (entry.IsDirectory) return h("span.thumb.folder", null, icon(["M3 7a2 2 0 0 1 2-2h4l2 2h8a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z"]));
    const repoPath = repoPathOf(entry);
    if (isImage(entry)) {
      const img = h("img.thumb", { alt: "", loading: "lazy" });
      img.addEventListener("error", () => img.replaceWith(h("span.thumb", null, extension(entry.ObjectName) || "?")), { once: true });
      if (isPrivate(repoPath)) showPrivateImage(img, repoPath, entry.ContentType);
      else img.src = base + cdnHref(cdnPath(repoPath));
      return img;
    }
    return h("span.thumb", null, extension(entry.ObjectName).slice(0, 4) || "file");
  }

  function row(entry) {
    const repoPath = repoPathOf(entry);
    if (entry.IsDirectory) {
      return h("tr", { dataset: { name: entry.ObjectName, kind: "dir" } },
        h("td", null, h("div.file-name", null, thumb(entry), h("a", { href: hashFor(`${dir}/${entry.ObjectName}`) }, h("b", null, entry.ObjectName)))),
        h("td.num.muted", null, "–"), h("td.muted", null, "folder"), h("td.nowrap", null, formatDate(entry.LastChanged)),
        h("td.actions", null, h("button.small.danger", { type: "button", onclick: () => removeFolder(entry) }, "Delete")));
    }
    const tr = h("tr", { dataset: { name: entry.ObjectName, kind: "file" } },
      h("td", null, h("div.file-name", null, thumb(entry),
        h("button.link", { type: "button", onclick: () => select(entry) }, entry.ObjectName))),
      h("td.num", null, formatBytes(entry.Length)),
      h("td.muted", null, entry.ContentType || extension(entry.ObjectName)),
      h("td.nowrap", null, formatDate(entry.LastChanged)),
      h("td.actions", null,
        isPrivate(repoPath) ? null : h("button.small", { type: "button", title: "Copy the CDN URL", onclick: () => copyText(base + cdnHref(cdnPath(repoPath))) }, "Copy URL"),
        h("button.small.danger", { type: "button", onclick: () => removeFile(entry) }, "Delete")));
    return tr;
  }

  // A file chosen (a click or a tap, Enter on its name): its preview is brought into sight (on a narrow screen it is
  // below the list) and takes the focus (its heading), so that the next Tab reaches its buttons.
  async function select(entry) {
    history.replaceState(null, "", hashFor(dir, entry.ObjectName));
    await showPreview(entry);
    const heading = preview.querySelector("h2");
    if (!heading) return;
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true });
    preview.scrollIntoView({ block: "nearest" });
  }

  // --- preview -------------------------------------------------------------------------------
  function stopPlayer() {
    if (player) { player.destroy(); player = null; }
  }

  /** Plays an HLS playlist in `video`; `video.dataset.ready` becomes "hls" once it can be played. */
  async function playHls(video, source, fallback) {
    const { default: Hls } = await import("../vendor/hls.light.min.mjs");
    if (Hls.isSupported()) {
      const hls = new Hls({ enableWorker: false });
      player = hls;
      hls.on(Hls.Events.ERROR, (_, data) => {
        if (data.fatal) { stopPlayer(); if (fallback) video.src = fallback; }
      });
      // The order hls.js documents: attach the media element, then load; playable once parsed.
      hls.on(Hls.Events.MEDIA_ATTACHED, () => hls.loadSource(source));
      hls.on(Hls.Events.MANIFEST_PARSED, () => { video.dataset.ready = "hls"; });
      hls.attachMedia(video);
    } else if (video.canPlayType("application/vnd.apple.mpegurl")) {
      video.src = source;
      video.dataset.ready = "hls";
    } else if (fallback) {
      video.src = fallback;
    }
  }

  async function mediaFor(entry, repoPath) {
    const cdn = base + cdnHref(cdnPath(repoPath));
    const direct = isPrivate(repoPath) ? storageUrl(repoPath) : cdn;
    const type = entry.ContentType || "";
    if (isImage(entry)) {
      const img = h("img#preview-image", { alt: entry.ObjectName });
      img.addEventListener("error", () => { if (img.src !== location.origin + storageUrl(repoPath)) img.src = storageUrl(repoPath); }, { once: true });
      if (isPrivate(repoPath)) showPrivateImage(img, repoPath, type);
      else img.src = direct;
      return img;
    }
    const videoSource = repoPath.match(VIDEO_SOURCE);
    if (videoSource || type.startsWith("video/") || extension(entry.ObjectName) === "m3u8") {
      const video = h("video#preview-video", { controls: true, muted: true, playsInline: true, preload: "metadata" });
      if (videoSource) {
        // A stock video is transcoded to HLS (1080/720/480) and streamed by the edges.
        const stream = `${base}/api/stream?video=${encodeURIComponent(videoSource[1])}`;
        const ready = await fetch(stream, { method: "HEAD" }).then((r) => r.ok).catch(() => false);
        const source = type.startsWith("video/") && !repoPath.endsWith(".ts") ? storageUrl(repoPath) : null;
        if (ready) playHls(video, stream, source);
        else if (source) video.src = source;
        video.dataset.source = ready ? "hls" : "file";
      } else if (extension(entry.ObjectName) === "m3u8") {
        playHls(video, cdn, null);
        video.dataset.source = "hls";
      } else {
        video.src = direct;
      }
      return video;
    }
    if ((type.startsWith("text/") || /json|xml|javascript/.test(type)) && entry.Length <= TEXT_PREVIEW_MAX) {
      const pre = h("pre", null, "Loading…");
      api("GET", storageUrl(repoPath)).then((text) => { pre.textContent = typeof text === "string" ? text : JSON.stringify(text, null, 2); })
        .catch((error) => { pre.textContent = error.message; });
      return pre;
    }
    return h("div.empty", null, "No preview for this type.");
  }

  async function showPreview(entry) {
    stopPlayer();
    for (const tr of listing.querySelectorAll("tr.selected")) tr.classList.remove("selected");
    const tr = [...listing.querySelectorAll("tr[data-kind=file]")].find((r) => r.dataset.name === entry.ObjectName);
    if (tr) tr.classList.add("selected");
    const repoPath = repoPathOf(entry);
    const path = cdnPath(repoPath);
    const url = base + cdnHref(path);
    const media = h("div.preview-media", null, await mediaFor(entry, repoPath));
    const videoSource = repoPath.match(VIDEO_SOURCE);
    const stream = videoSource ? `${base}/api/stream?video=${encodeURIComponent(videoSource[1])}` : null;
    clear(preview,
      h("div.card-head", null, h("h2", { title: entry.ObjectName }, entry.ObjectName),
        isPrivate(repoPath) ? badge("private", "warn") : badge("public", "ok")),
      media,
      h("dl.meta", null,
        h("dt", null, "Size"), h("dd", null, `${formatBytes(entry.Length)} (${entry.Length.toLocaleString("en-US")} bytes)`),
        h("dt", null, "Type"), h("dd", null, entry.ContentType || "–"),
        h("dt", null, "Modified"), h("dd", null, formatDate(entry.LastChanged)),
        h("dt", null, "SHA-256"), h("dd.mono.small", null, (entry.Checksum || "").toLowerCase() || "–"),
        stream ? [h("dt", null, "HLS stream"), h("dd", null, h("a", { href: stream, target: "_blank", rel: "noopener" }, stream))] : null,
        h("dt", null, "CDN URL"), h("dd", null, isPrivate(repoPath)
          ? h("span.muted", null, "Private: served only through signed URLs (assetcdn sign).")
          : h("a#preview-url", { href: url, target: "_blank", rel: "noopener" }, url))),
      h("div.row", null,
        h("a.button", { href: storageUrl(repoPath), download: entry.ObjectName }, "Download"),
        isPrivate(repoPath) ? null : h("button", { type: "button", onclick: () => copyText(url) }, "Copy URL"),
        isPrivate(repoPath) ? null : h("a.button#preview-purge", { href: `#/purge?url=${encodeURIComponent(path)}` }, "Purge…"),
        h("button.danger", { type: "button", onclick: () => removeFile(entry) }, "Delete")));
  }

  // --- changes -------------------------------------------------------------------------------
  function startUploads(files) {
    const jobs = files.map((file) => {
      const bar = h("progress", { max: 1, value: 0 });
      const state = h("span.small.muted", null, "waiting");
      const item = h("div.upload", { dataset: { name: file.name } }, h("span.name", null, `${file.name} · ${formatBytes(file.size)}`), bar, state);
      uploads.append(item);
      return { file, bar, state, item };
    });
    (async () => {
      let uploaded = 0;
      for (const job of jobs) { // one at a time: uploads into one repository are serialised anyway
        job.state.textContent = "uploading";
        try {
          await upload(`${dir}/${job.file.name}`, job.file, (fraction) => {
            job.bar.value = fraction;
            job.state.textContent = `${Math.round(fraction * 100)}%`;
          }).promise;
          job.state.textContent = "done";
          job.state.className = "small status-2";
          job.item.dataset.state = "done";
          uploaded += 1;
        } catch (error) {
          job.state.textContent = error.message;
          job.state.className = "small status-4";
          job.state.title = error.message;
          job.item.dataset.state = "failed";
        }
      }
      if (uploaded) {
        toast(`${uploaded} file${uploaded === 1 ? "" : "s"} uploaded`);
        await load();
      }
      setTimeout(() => { for (const job of jobs) if (job.item.dataset.state === "done") job.item.remove(); }, 4000);
    })();
  }

  /** Asks for a folder's name; a refused one is asked for again, as typed, with the reason beside it. */
  async function newFolder(typed = "", problem = "") {
    const input = h("input", { type: "text", value: typed, placeholder: "e.g. campaigns", autocomplete: "off", "aria-label": "Folder name" });
    const name = await dialog({
      title: "New folder", body: h("div", null, h("label.field", null, `Inside ${dir}/`, input), h("div.field-error#folder-error", null, problem)),
      actions: [{ label: "Cancel", value: null }, { label: "Create", value: "create", class: "primary" }],
    });
    const folder = input.value.trim();
    if (name !== "create" || !folder) return;
    try {
      // A folder exists in git only with a file in it: an empty .gitkeep, hidden from listings.
      await upload(`${dir}/${folder}/.gitkeep`, new Blob([]), () => {}).promise;
      location.assign(hashFor(`${dir}/${folder}`));
    } catch (error) {
      if (error.status !== 401) await newFolder(input.value, error.message);
    }
  }

  async function removeFile(entry) {
    const repoPath = repoPathOf(entry);
    if (!(await confirmDanger({ title: `Delete ${entry.ObjectName}?`, message: `${cdnPath(repoPath)} is removed in one commit and purged from every edge.` }))) return;
    try {
      await del(storageUrl(repoPath));
      toast(`${entry.ObjectName} deleted`);
      stopPlayer();
      // Deleted from its preview: the focus, on the preview's Delete, goes to the list (redraw keeps it there).
      if (preview.contains(document.activeElement)) { listing.tabIndex = -1; listing.focus({ preventScroll: true }); }
      clear(preview, empty("Select a file to preview it."));
      history.replaceState(null, "", hashFor(dir));
      await load();
    } catch (error) {
      toast(error instanceof ApiError ? error.message : String(error), "error");
    }
  }

  async function removeFolder(entry) {
    const repoPath = repoPathOf(entry);
    if (!(await confirmDanger({ title: `Delete the folder ${entry.ObjectName}?`, message: `Every file under ${cdnPath(repoPath)}/ is removed in one commit and purged from every edge.`, typeToConfirm: entry.ObjectName }))) return;
    try {
      await del(storageUrl(`${repoPath}/`));
      toast(`${entry.ObjectName}/ deleted`);
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  await load();
  return stopPlayer;
}
