// The page: try "remove background" (and fix its cutout with clicks, or live on a camera) and
// "select" on a picture, through the gateway's HTTP API (and its frame stream's WebSocket).
// Plain ES module, no dependency, no build step. Every call goes to /api/v1 with the app key the
// page was given (the link `craftai serve --web` gives carries the local key in its fragment). The
// key is kept in this page's memory only, never in the browser's storage: a program that takes the
// gateway's port after it stopped serves a page that finds nothing there.

import { AdviceRules, CutoutAction, PartsOf, Reason, Subjects } from "/vocabulary.js"; // served by the gateway from the wire's own

const API = "/api/v1";
const $ = (id) => document.getElementById(id);
const FEATURES = ["image.matte", "image.segment"];
const READY = new Set(["ROUTE_STATE_PREPARED", "ROUTE_STATE_READY"]);
const MASK_RGBA = [30, 144, 255, 150];
const MARK_COLOURS = { [CutoutAction.KEEP]: "#38a169", [CutoutAction.REMOVE]: "#e53e3e" }; // fix mode's marks
const PALETTE = [[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180],
  [70, 240, 240], [240, 50, 230], [210, 245, 60], [0, 128, 128], [170, 110, 40], [128, 0, 0]];

const state = {
  key: "", // in memory only (see above)
  appId: "",
  status: null,
  chosen: {}, // feature -> {recipe, engine}
  file: null,
  shown: false, // the browser could decode the picture
  session: null, // {session_id, width, height, recipe, engine, device}
  selecting: false,
  prompt: { points: [], box: null },
  history: [],
  sequence: 0,
  masks: 0, // overlay updates so far (tests wait on body[data-masks])
  urls: {}, // slot -> the blob URL shown there (revoked when the slot gets another, or the picture changes)
  // The last cutout made: {file, cutout (Blob), format} (the composite is re-made from it), the
  // removal's options (query string) and background picture (fix mode opens its session with them),
  // recomposed (the composite shown is the page's own: a background chosen after the run), and
  // fix mode's prompts as sent with the lists before each change (undo).
  made: null,
  fixing: null, // fix mode: {made, path (the cutout session's opening), id ("" until open), opening (a Promise)}
  fixSequence: 0,
  fixed: 0, // cutouts shown in fix mode (tests wait on body[data-fixed])
  composed: 0, // composites made in the page (tests wait on body[data-composed])
  composing: 0, // the latest background change or removal: only its composite is drawn and linked
  camera: null, // camera mode: {media, video, capture, socket, sent, pending, ahead, shown, sending, drawing}
};

class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `the gateway answered ${status}`);
    this.status = status;
    this.reason = error.reason || "";
    this.code = error.code || "";
  }
}

class Unreachable extends Error {
  // fetch itself failed: the gateway did not answer at all.
  constructor() {
    super("the gateway did not answer");
    this.reason = "UNREACHABLE";
  }
}

// What to do about an error, where its message alone does not say (the services' messages name
// their own fixes, e.g. the command that sets a route up).
const FIXES = {
  [Reason.BAD_PICTURE]: "Choose a PNG, JPEG or WebP picture.",
  [Reason.EMPTY_PICTURE]: "Choose a PNG, JPEG or WebP picture.",
  [Reason.PICTURE_TOO_LARGE]: "Choose a smaller picture.",
  [Reason.UPLOAD_TOO_LARGE]: "Choose a smaller picture.",
  [Reason.ROUTE_NOT_SET_UP]: "Press Set up on the route above: it downloads and prepares it once.",
  [Reason.SOURCES_FAILED]: "This machine could not download the files: bring them by hand (docs/STORE.md), then Set up again.",
  [Reason.FILE_MISMATCH]: "The downloaded file is not the pinned one: Set up again, or bring the file by hand (docs/STORE.md).",
  [Reason.MISSING_APP_KEY]: "Open the link `craftai serve --web` printed (it carries the key), or enter a key above.",
  [Reason.BAD_APP_KEY]: "Open the link `craftai serve --web` printed (it carries the key), or enter a key above.",
  [Reason.TOO_MANY_SESSIONS]: "Pictures kept for this app id are at their limit: close other tabs, or wait a few minutes.",
  [Reason.SESSION_NOT_FOUND]: "Choose the picture again.",
  [Reason.SHUTTING_DOWN]: "The services are stopping: start `craftai serve` again, then retry.",
  UNAVAILABLE: "The services do not answer: is `craftai serve` running?",
  UNREACHABLE: "The gateway does not answer: is `craftai serve --web` still running? Then open its link again.",
};

// -- keys ------------------------------------------------------------------------------------

function takeKeyFromLink() {
  const found = new URLSearchParams(location.hash.slice(1)).get("key");
  if (found) {
    state.key = found;
    history.replaceState(null, "", location.pathname + location.search); // the key leaves the address bar
  }
}

function headers(extra = {}) {
  const made = { ...extra };
  if (state.key) made["Authorization"] = `Bearer ${state.key}`;
  if (state.appId) made["Craftai-App-Id"] = state.appId;
  return made;
}

async function api(path, { method = "GET", body, type, accept, json } = {}) {
  const extra = {};
  if (json !== undefined) {
    extra["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (type) {
    extra["Content-Type"] = type;
  }
  if (accept) extra["Accept"] = accept;
  let response;
  try {
    response = await fetch(API + path, { method, body, headers: headers(extra) });
  } catch {
    throw new Unreachable();
  }
  if (!response.ok) {
    let parsed = null;
    try { parsed = await response.json(); } catch { /* not JSON: the status says it */ }
    const error = new ApiError(response.status, parsed);
    if (response.status === 401 || response.status === 403) $("key-panel").hidden = false;
    throw error;
  }
  return response;
}

// -- what is shown -----------------------------------------------------------------------------

function showError(error) {
  // The error stays until the next action begins (busy clears it), whatever is refreshed meanwhile.
  $("error-message").textContent = error ? error.message : "";
  $("error-fix").textContent = error ? (FIXES[error.reason] || FIXES[error.code] || "") : "";
  $("error").hidden = !error;
  document.body.dataset.error = error ? (error.reason || "error") : "";
}

async function busy(work) {
  $("busy").hidden = false;
  showError(null);
  try {
    return await work();
  } catch (error) {
    showError(error);
    return undefined;
  } finally {
    $("busy").hidden = true;
  }
}

function url(slot, blob) {
  // A blob URL for one place of the page; the one it replaces there is revoked (its bytes freed).
  forget(slot);
  const made = URL.createObjectURL(blob);
  state.urls[slot] = made;
  return made;
}

function forget(...slots) {
  for (const slot of slots.length ? slots : Object.keys(state.urls)) {
    if (state.urls[slot]) URL.revokeObjectURL(state.urls[slot]);
    delete state.urls[slot];
  }
}

function bytes(base64) {
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function ms(timing) {
  const total = Object.values(timing || {}).reduce((a, b) => a + b, 0);
  return `${Math.round(total)} ms on the server`;
}

// -- status, routes and setup ----------------------------------------------------------------

function routesOf(feature) {
  return (state.status.routes || []).filter((r) => r.route.feature === feature);
}

function chooseRoutes() {
  for (const feature of FEATURES) {
    if (state.chosen[feature]) continue;
    const advised = (state.status.resolved[feature] || {}).route;
    const routes = routesOf(feature);
    const same = (r) => advised && r.route.recipe === advised.recipe && r.route.engine === advised.engine;
    const pick = routes.find((r) => same(r) && READY.has(r.state)) || routes.find((r) => READY.has(r.state))
      || routes.find(same) || routes[0];
    if (pick) state.chosen[feature] = { recipe: pick.route.recipe, engine: pick.route.engine };
  }
}

// A recipe whose mattes are of parts (u2net_cloth_seg's clothes): the part to keep, or all of them
// stacked, as the service answers without one (craftai_wire.vocabulary PARTS_OF).
function renderParts(recipe) {
  const parts = PartsOf[recipe] || [];
  const select = $("part");
  const kept = select.value;
  select.replaceChildren(select.options[0]);
  for (const part of parts) select.append(new Option(part, part));
  select.value = parts.includes(kept) ? kept : "";
  $("part-choice").hidden = parts.length === 0;
}

function recipeOf(feature, name) {
  const found = (state.status.features || []).find((f) => f.name === feature);
  return found && (found.recipes || []).find((r) => r.name === name);
}

// What the chosen recipe is, what its chosen engine's route downloads (the catalogue's
// Route.download_bytes; an int64, so a string in the proto's JSON) and its licence (the catalogue's words).
function modelLine(recipe, engine) {
  const line = document.createElement("p");
  line.className = "hint model";
  const route = (recipe.routes || []).find((r) => r.engine === engine);
  const size = Number((route && route.download_bytes) || 0);
  const licence = recipe.available === false ? `not offered: ${recipe.unavailable_reason}` : `licence: ${recipe.license}`;
  const runs = ((state.status && state.status.runtime.measured) || []).filter((m) => m.route.recipe === recipe.name);
  const here = runs.map((m) => `${Math.round(m.network_ms)} ms a picture here (${m.route.engine} on ${m.device})`);
  line.textContent = `${recipe.title}: ${recipe.network}; download ${(size / 1e6).toFixed(1)} MB; ${licence}` +
    (here.length ? `; ${here.join(", ")}` : "");
  return line;
}

// The recipe the advice's rule gives this picture (craftai_wire.advice, as `--recipe auto`): the
// first rule for the subject on this device that the picture's longer side reaches.
function renderAdvice() {
  const runtime = state.status && state.status.runtime;
  const button = $("use-advice");
  if (!runtime || !state.shown) {
    $("advice").textContent = "";
    button.hidden = true;
    return;
  }
  const width = $("picture").width, height = $("picture").height;
  const subject = $("subject").value;
  const gpu = Boolean(runtime.gpu_available);
  const rule = AdviceRules.find((r) => r.subject === subject && r.gpu === gpu && Math.max(width, height) >= r.min_side);
  if (!rule) return;
  const route = routesOf("image.matte").find((r) => r.route.recipe === rule.recipe);
  $("advice").textContent = `advised for this ${width}x${height} picture on a ${gpu ? "GPU" : "CPU"}: ` +
    `${rule.recipe} (${rule.why})`;
  document.body.dataset.advice = rule.recipe;
  const chosen = state.chosen["image.matte"];
  button.hidden = !route || (chosen && chosen.recipe === rule.recipe);
  button.onclick = () => {
    state.chosen["image.matte"] = { recipe: route.route.recipe, engine: route.route.engine };
    renderRoutes();
  };
}

function renderRoutes() {
  const runtime = state.status.runtime;
  $("runtime").textContent = `infer runs on ${runtime.device}` +
    (runtime.gpu_available ? ` (${runtime.gpu_name})` : " (no GPU)") + `; engines: ${runtime.engines.join(", ")}`;
  document.body.dataset.device = runtime.device;
  const box = $("routes");
  box.replaceChildren();
  for (const feature of FEATURES) {
    const card = document.createElement("div");
    card.className = "route";
    card.dataset.feature = feature;
    const title = document.createElement("h2");
    title.textContent = feature === "image.matte" ? "Remove background (image.matte)" : "Select (image.segment)";
    const select = document.createElement("select");
    select.setAttribute("aria-label", `${feature} route`);
    for (const r of routesOf(feature)) {
      const option = document.createElement("option");
      option.value = `${r.route.recipe}/${r.route.engine}`;
      option.textContent = `${r.route.recipe} / ${r.route.engine}`;
      const chosen = state.chosen[feature];
      option.selected = chosen && chosen.recipe === r.route.recipe && chosen.engine === r.route.engine;
      select.append(option);
    }
    select.addEventListener("change", () => {
      const [recipe, engine] = select.value.split("/");
      state.chosen[feature] = { recipe, engine };
      if (feature === "image.segment") forgetSession();
      renderRoutes();
    });
    const chosen = state.chosen[feature];
    const route = chosen && routesOf(feature).find((r) => r.route.recipe === chosen.recipe && r.route.engine === chosen.engine);
    const ready = route && READY.has(route.state);
    const badge = document.createElement("span");
    badge.className = `state ${ready ? "ready" : "missing"}`;
    badge.textContent = route ? route.state.replace("ROUTE_STATE_", "").toLowerCase() : "no route";
    card.dataset.ready = ready ? "true" : "false";
    card.append(title, select, " ", badge);
    const recipe = chosen && recipeOf(feature, chosen.recipe);
    if (recipe) card.append(modelLine(recipe, chosen.engine));
    if (feature === "image.matte") renderParts(chosen && chosen.recipe);
    if (route && !ready) {
      const detail = document.createElement("p");
      detail.className = "hint";
      detail.textContent = route.detail || "not set up on this installation";
      const button = document.createElement("button");
      button.textContent = "Set up";
      button.className = "setup";
      button.addEventListener("click", () => setUp(feature, card, button));
      card.append(detail, button);
    }
    box.append(card);
  }
  renderAdvice();
}

async function loadStatus() {
  const response = await api("/status");
  state.status = await response.json();
  chooseRoutes();
  renderRoutes();
  state.statuses = (state.statuses || 0) + 1;
  document.body.dataset.statuses = String(state.statuses);
}

async function refreshStatus() {
  // The routes' badges after a call that may have changed them (set up, loaded on first use);
  // never clears the error the call left.
  try {
    await loadStatus();
  } catch (error) {
    if ($("error").hidden) showError(error);
  }
}

function* events(text) {
  for (const block of text.split("\n\n")) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trim());
    }
    if (data.length) yield [name, JSON.parse(data.join("\n"))];
  }
}

async function readEvents(response, onEvent) {
  // Server-sent events of a POST (EventSource only GETs): each complete event to onEvent; an
  // `error` event is thrown as the gateway's error.
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += value;
    const cut = pending.lastIndexOf("\n\n");
    if (cut < 0) continue;
    const complete = pending.slice(0, cut);
    pending = pending.slice(cut + 2);
    for (const [name, data] of events(complete)) {
      if (name === "error") throw new ApiError(data.status, { error: data });
      onEvent(name, data);
    }
  }
}

async function setUp(feature, card, button) {
  button.disabled = true;
  const bar = document.createElement("progress");
  const line = document.createElement("p");
  line.className = "hint";
  card.append(bar, line);
  await busy(async () => {
    const response = await api("/setup", { method: "POST", json: { feature, ...state.chosen[feature] } });
    await readEvents(response, (name, data) => {
      if (name === "progress") {
        bar.max = Number(data.total) || 1;
        if (Number(data.total)) bar.value = Number(data.done); else bar.removeAttribute("value");
        line.textContent = `${data.stage}: ${data.message}`;
      } else if (name === "notice") {
        line.textContent = data.message;
      }
    });
  });
  await refreshStatus();
}

// -- the picture ------------------------------------------------------------------------------

async function choose(file) {
  if (!file) return;
  forgetSession();
  leaveFix();
  forget();
  state.made = null;
  $("fix").disabled = true; // until its background is removed
  state.file = file;
  state.prompt = { points: [], box: null };
  state.history = [];
  $("file-name").textContent = `${file.name} (${file.size.toLocaleString()} bytes)`;
  $("cutout-view").hidden = true;
  showError(null);
  try {
    const picture = await createImageBitmap(file);
    for (const id of ["picture", "overlay", "marks"]) {
      $(id).width = picture.width;
      $(id).height = picture.height;
    }
    $("picture").getContext("2d").drawImage(picture, 0, 0);
    $("overlay").getContext("2d").clearRect(0, 0, picture.width, picture.height);
    state.shown = true;
    $("picture-view").hidden = false;
  } catch {
    state.shown = false; // the services say what is wrong with it when asked
    $("picture-view").hidden = true;
  }
  drawMarks();
  renderAdvice();
  $("remove").disabled = false;
  $("select").disabled = false;
  $("everything").disabled = false;
  setSelecting(false);
}

function query(feature, extra = {}) {
  const params = new URLSearchParams({ ...state.chosen[feature], ...extra });
  return params.toString();
}

function matteOptions() {
  const background = $("background").value;
  const outputs = ["cutout", "matte", "mask"];
  const options = { format: $("format").value };
  if (background === "color") options.bg_color = $("bg-color").value;
  if (background === "blur") options.bg_blur = $("bg-blur").value;
  if (background !== "none") outputs.push("composite");
  if ($("naive").checked) options.naive = "true";
  if ($("threshold").value !== "") options.threshold = $("threshold").value;
  if (!$("part-choice").hidden && $("part").value !== "") options.part = $("part").value;
  return { outputs: outputs.join(","), answer: "json", ...options };
}

function backgroundPicture() {
  return $("background").value === "picture" ? $("bg-file").files[0] : undefined;
}

function suffix(format) {
  return format === "jpeg" ? "jpg" : format;
}

function stem() {
  return (state.file.name || "picture").replace(/\.[^.]*$/, "");
}

function link(name, blob, format) {
  // A download of one output: a link of its own, in the downloads' row.
  let found = $(`download-${name}`);
  if (!found) {
    found = document.createElement("a");
    found.id = `download-${name}`;
    $("downloads").append(found);
  }
  found.href = url(`download-${name}`, blob);
  found.download = `${stem()}.${name}.${suffix(format)}`;
  found.textContent = `${name[0].toUpperCase()}${name.slice(1)} (${format.toUpperCase()})`;
}

function matteBody(file, backdrop) {
  // The picture as the raw body; with a background picture, both in one form (the fetch sets its boundary).
  if (!backdrop) return { body: file, type: file.type || "application/octet-stream" };
  const body = new FormData();
  body.append("picture", file, file.name || "picture");
  body.append("background", backdrop, backdrop.name || "background");
  return { body, type: undefined };
}

async function showOutputs(result, pageComposite = false) {
  // The service's outputs: the cutout (and the composite) drawn, each linked for download; with
  // pageComposite, the composite shown is the page's own (recompose makes it again) and not replaced.
  const blobs = {};
  for (const [name, image] of Object.entries(result.outputs)) {
    blobs[name] = new Blob([bytes(image.data)], { type: image.media_type });
  }
  await draw($("cutout"), blobs.cutout);
  if (!pageComposite) {
    $("composite").hidden = !blobs.composite;
    if (blobs.composite) await draw($("composite"), blobs.composite);
  }
  forget(...Object.keys(state.urls).filter((slot) => slot.startsWith("download-")));
  $("downloads").replaceChildren();
  for (const [name, image] of Object.entries(result.outputs)) {
    if (!pageComposite || name !== "composite") link(name, blobs[name], image.format);
  }
  return blobs;
}

async function draw(canvas, blob) {
  const picture = await createImageBitmap(blob, { premultiplyAlpha: "none", colorSpaceConversion: "none" });
  canvas.width = picture.width;
  canvas.height = picture.height;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  context.drawImage(picture, 0, 0);
}

async function removeBackground() {
  leaveFix(); // a new cutout: the one fixed so far is forgotten on the server
  state.composing += 1; // a composite the page is still making of the last cutout gives way to this one's
  await busy(async () => {
    const backdrop = backgroundPicture();
    if ($("background").value === "picture" && !backdrop) throw new Error("choose the background picture first");
    const options = query("image.matte", matteOptions());
    const response = await api(`/remove-background?${options}`, {
      method: "POST", ...matteBody(state.file, backdrop),
    });
    const result = await response.json();
    const blobs = await showOutputs(result);
    state.made = {
      file: state.file, cutout: blobs.cutout, format: result.outputs.cutout.format, options, backdrop,
      recomposed: false, prompts: [], history: [],
    };
    $("cutout-caption").textContent = `${result.recipe} / ${result.engine} on ${result.device}, ${ms(result.timing_ms)}`;
    $("cutout-view").hidden = false;
    $("fix").disabled = false;
    document.body.dataset.cutout = "shown";
  });
  await refreshStatus(); // the route answered: loaded now
}

async function backdropOf(kind, width, height, source = state.file) {
  // The background alone, at the picture's size: a colour, the picture (or a camera's frame)
  // blurred, or another picture scaled to cover (the middle kept), as the service makes it.
  const canvas = new OffscreenCanvas(width, height);
  const context = canvas.getContext("2d");
  if (kind === "color") {
    context.fillStyle = $("bg-color").value;
    context.fillRect(0, 0, width, height);
  } else if (kind === "blur") {
    context.filter = `blur(${Number($("bg-blur").value) || 1}px)`;
    context.drawImage(await createImageBitmap(source), 0, 0, width, height);
  } else {
    const picture = await createImageBitmap(backgroundPicture());
    const scale = Math.max(width / picture.width, height / picture.height);
    const [w, h] = [picture.width * scale, picture.height * scale];
    context.drawImage(picture, (width - w) / 2, (height - h) / 2, w, h);
  }
  return canvas;
}

async function recompose() {
  // Only the background changed since the cutout was made: the composite is the new background
  // with the cutout laid over it, here in the page (no model runs, no upload). A change made while
  // another is composed (dragging the colour picker sends many) supersedes it: only the latest is
  // drawn, whole and at once, so an earlier one that finishes later never shows.
  const generation = ++state.composing;
  const kind = $("background").value;
  if (!state.made || state.made.file !== state.file || $("cutout-view").hidden) return;
  if (kind === "none") {
    state.made.recomposed = true;
    $("composite").hidden = true;
    forget("download-composite");
    $("download-composite")?.remove();
    return;
  }
  if (kind === "picture" && !backgroundPicture()) return; // the next choice of a file composes
  state.made.recomposed = true; // fix mode's cutouts are laid over this background too
  await busy(async () => {
    const cutout = await createImageBitmap(state.made.cutout);
    const backdrop = await backdropOf(kind, cutout.width, cutout.height);
    if (generation !== state.composing) return; // a later change composes instead
    const canvas = $("composite");
    canvas.width = cutout.width;
    canvas.height = cutout.height;
    const context = canvas.getContext("2d");
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.drawImage(backdrop, 0, 0);
    context.drawImage(cutout, 0, 0);
    canvas.hidden = false;
    const format = $("format").value === "jpeg" ? "jpeg" : "png";
    const blob = await new Promise((done) => canvas.toBlob(done, `image/${format}`, 0.9));
    if (generation !== state.composing) return;
    link("composite", blob, format);
    state.composed += 1;
    document.body.dataset.composed = String(state.composed);
  });
}

// -- fix: the cutout fixed with clicks ------------------------------------------------------------
// A cutout session: the server keeps the removal's picture, its matte and its SAM embedding (opened
// with the removal's picture and options); each change sends the whole list of prompts so far and
// gets the outputs of the whole picture after all of them, so undo is the list before the change.
// The list stays with the removal (state.made): leaving fix mode forgets the session on the server,
// coming back opens it again and sends the list.

function setFixing(on) {
  $("fix").setAttribute("aria-pressed", on ? "true" : "false");
  $("fix-help").hidden = !on;
  renderTools();
}

function cutoutPath(made) {
  // The removal's options, with the select route chosen (it finds the regions the prompts name).
  const params = new URLSearchParams(made.options);
  const segment = state.chosen["image.segment"];
  if (segment) {
    params.set("segment_recipe", segment.recipe);
    params.set("segment_engine", segment.engine);
  }
  return `/cutouts?${params}`;
}

function openCutout(fixing) {
  // The removal's picture and options, sent again: the server makes the matte and the SAM embedding
  // and keeps them. One opening at a time (changes that find the session forgotten wait for the same
  // one); a session opened for a fix mode left meanwhile is closed at once (null).
  if (!fixing.opening) {
    fixing.opening = (async () => {
      const response = await api(fixing.path, { method: "POST", ...matteBody(fixing.made.file, fixing.made.backdrop) });
      const result = await response.json();
      if (state.fixing !== fixing) {
        closeCutout(result.session_id);
        return null;
      }
      fixing.id = result.session_id;
      document.body.dataset.cutoutSession = fixing.id;
      return result;
    })().finally(() => { fixing.opening = null; });
  }
  return fixing.opening;
}

function closeCutout(id) {
  // keepalive: the request goes even while the page is left (pagehide).
  return fetch(`${API}/cutouts/${id}`, { method: "DELETE", headers: headers(), keepalive: true })
    .catch(() => {})
    .finally(() => {
      if (document.body.dataset.cutoutSession === id) delete document.body.dataset.cutoutSession;
    });
}

async function fixCall(fixing, ask) {
  // A call on the cutout session (ask(id)), opened again when the server forgot it (idle, memory,
  // restart): the picture goes again, then the call. null: fix mode was left meanwhile.
  if (!fixing.id && !(await openCutout(fixing))) return null;
  const id = fixing.id;
  try {
    return await ask(id);
  } catch (error) {
    if (error.status !== 404 || error.reason !== Reason.SESSION_NOT_FOUND) throw error;
    if (fixing.id === id) fixing.id = ""; // else another change has opened it again already
    if (!fixing.id && !(await openCutout(fixing))) return null;
    return ask(fixing.id);
  }
}

async function showFixed(fixing, result) {
  const made = fixing.made;
  const blobs = await showOutputs(result, made.recomposed);
  made.cutout = blobs.cutout; // a background chosen now is laid under the cutout as fixed
  const prompts = result.prompts === 1 ? "1 prompt" : `${result.prompts} prompts`;
  $("cutout-caption").textContent = `fixed with ${prompts} (${result.changed_pixels.toLocaleString()} pixels ` +
    `changed): ${result.recipe} / ${result.engine} on ${result.device}, ${ms(result.timing_ms)}`;
  if (made.recomposed) await recompose();
  state.fixed += 1;
  document.body.dataset.fixed = String(state.fixed);
}

async function sendFix(fixing) {
  // The outputs after the whole list, shown unless a later change's are on their way.
  const asked = ++state.fixSequence;
  const prompts = fixing.made.prompts;
  const response = await fixCall(fixing, (id) => api(`/cutouts/${id}/refine`, { method: "POST", json: { prompts } }));
  if (!response) return;
  const result = await response.json();
  if (asked !== state.fixSequence || state.fixing !== fixing) return;
  await showFixed(fixing, result);
}

async function toggleFix() {
  if (state.fixing) {
    leaveFix();
    return;
  }
  const made = state.made;
  if (!made || made.file !== state.file) return;
  await busy(async () => {
    // exclusive with select: its selection is cleared and its picture let go first (an app may keep as few as one)
    setSelecting(false);
    state.prompt = { points: [], box: null };
    state.history = [];
    clearMask();
    await forgetSession();
    const fixing = { made, path: cutoutPath(made), id: "", opening: null };
    state.fixing = fixing;
    setFixing(true);
    drawMarks();
    const asked = ++state.fixSequence;
    let opened;
    try {
      opened = await openCutout(fixing);
    } catch (error) {
      if (state.fixing === fixing) leaveFix();
      throw error;
    }
    if (!opened) return;
    $("info").textContent = `fix: ${opened.recipe} / ${opened.engine} on ${opened.device}`;
    if (made.prompts.length) await sendFix(fixing); // the list of an earlier visit, on the new session
    else if (asked === state.fixSequence) await showFixed(fixing, opened);
  });
  await refreshStatus(); // the routes answered: loaded now
}

async function fixChange(prompts, history) {
  // A new list sent; when it is refused or fails, the list is the one before (as if never asked).
  const fixing = state.fixing;
  const made = fixing.made;
  const before = { prompts: made.prompts, history: made.history };
  made.prompts = prompts;
  made.history = history;
  renderTools();
  drawMarks();
  await busy(async () => {
    try {
      await sendFix(fixing);
    } catch (error) {
      if (made.prompts === prompts) {
        Object.assign(made, before);
        if (state.fixing === fixing) {
          renderTools();
          drawMarks();
        }
      }
      throw error;
    }
  });
}

function fixPrompt(prompt) {
  const { prompts, history } = state.fixing.made;
  return fixChange([...prompts, prompt], [...history, prompts]);
}

function fixUndo() {
  const { history } = state.fixing.made;
  if (history.length) fixChange(history[history.length - 1], history.slice(0, -1));
}

function fixClear() {
  const { prompts, history } = state.fixing.made;
  if (prompts.length) fixChange([], [...history, prompts]);
}

function leaveFix() {
  // Fix mode off: the cutout session is forgotten on the server (the Promise is answered once it is);
  // the cutout shown stays as fixed, and its list with the removal.
  const fixing = state.fixing;
  if (!fixing) return Promise.resolve();
  state.fixing = null;
  state.fixSequence += 1; // an answer on its way is not shown
  setFixing(false);
  drawMarks();
  $("info").textContent = "";
  return fixing.id ? closeCutout(fixing.id) : Promise.resolve(); // an opening on its way closes its own
}

function drawFixMarks(context, r) {
  // Each prompt of the list: keep's in green, remove's in red; a box dashed, a click a dot.
  for (const prompt of state.fixing.made.prompts) {
    const colour = MARK_COLOURS[prompt.action];
    if (prompt.box) {
      const [x0, y0, x1, y1] = prompt.box;
      context.setLineDash([6, 4]);
      context.lineWidth = Math.max(2, r / 2);
      context.strokeStyle = colour;
      context.strokeRect(x0, y0, x1 - x0, y1 - y0);
      context.setLineDash([]);
    }
    for (const [x, y] of prompt.points || []) {
      context.beginPath();
      context.arc(x, y, r, 0, 2 * Math.PI);
      context.fillStyle = colour;
      context.fill();
      context.lineWidth = 2;
      context.strokeStyle = "#fff";
      context.stroke();
    }
  }
}

// -- select -----------------------------------------------------------------------------------

function forgetSession() {
  // The picture forgotten on the server; the Promise is answered once it is (fix mode waits for it).
  let forgotten = Promise.resolve();
  if (state.session) {
    forgotten = fetch(`${API}/sessions/${state.session.session_id}`, { method: "DELETE", headers: headers(), keepalive: true })
      .catch(() => {});
  }
  state.session = null;
  return forgotten;
}

async function openSession() {
  const response = await api(`/sessions?${query("image.segment")}`, {
    method: "POST", body: state.file, type: state.file.type || "application/octet-stream",
  });
  state.session = await response.json();
  document.body.dataset.session = state.session.session_id;
}

function setSelecting(on) {
  state.selecting = on;
  $("select").setAttribute("aria-pressed", on ? "true" : "false");
  $("help").hidden = !on;
  renderTools();
}

function renderTools() {
  // Undo and Clear act on the mode that is on: select's prompt, or fix mode's list.
  if (state.fixing) {
    $("undo").disabled = state.fixing.made.history.length === 0;
    $("clear").disabled = state.fixing.made.prompts.length === 0;
  } else {
    $("undo").disabled = !state.selecting || state.history.length === 0;
    $("clear").disabled = !state.selecting;
  }
}

async function toggleSelect() {
  if (state.selecting) {
    setSelecting(false);
    return;
  }
  await busy(async () => {
    await leaveFix(); // exclusive: the cutout's picture is let go first (an app may keep as few as one)
    if (!state.session) await openSession();
    setSelecting(true);
    $("info").textContent = `select: ${state.session.recipe} / ${state.session.engine} on ${state.session.device}`;
  });
  await refreshStatus(); // the route answered: loaded now
}

function change(next) {
  state.history.push(state.prompt);
  state.prompt = next;
  setSelecting(true);
  drawMarks();
  return segment();
}

function drawMarks() {
  const canvas = $("marks");
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  const r = Math.max(4, Math.round(Math.min(canvas.width, canvas.height) / 120));
  if (state.fixing) {
    drawFixMarks(context, r);
    return;
  }
  if (state.prompt.box) {
    const [x0, y0, x1, y1] = state.prompt.box;
    context.setLineDash([6, 4]);
    context.lineWidth = Math.max(2, r / 2);
    context.strokeStyle = "#ffd166";
    context.strokeRect(x0, y0, x1 - x0, y1 - y0);
    context.setLineDash([]);
  }
  for (const p of state.prompt.points) {
    context.beginPath();
    context.arc(p.x, p.y, r, 0, 2 * Math.PI);
    context.fillStyle = p.foreground ? "#38a169" : "#e53e3e";
    context.fill();
    context.lineWidth = 2;
    context.strokeStyle = "#fff";
    context.stroke();
  }
}

async function paintMask(blob) {
  const mask = await createImageBitmap(blob);
  const scratch = new OffscreenCanvas(mask.width, mask.height);
  const context = scratch.getContext("2d");
  context.drawImage(mask, 0, 0);
  const pixels = context.getImageData(0, 0, mask.width, mask.height);
  const data = pixels.data;
  for (let i = 0; i < data.length; i += 4) {
    const on = data[i] > 0;
    data[i] = MASK_RGBA[0]; data[i + 1] = MASK_RGBA[1]; data[i + 2] = MASK_RGBA[2];
    data[i + 3] = on ? MASK_RGBA[3] : 0;
  }
  $("overlay").getContext("2d").putImageData(pixels, 0, 0);
}

function clearMask() {
  const overlay = $("overlay");
  overlay.getContext("2d").clearRect(0, 0, overlay.width, overlay.height);
  $("mask-caption").textContent = "";
  $("download-selection").hidden = true;
}

async function segment() {
  const asked = ++state.sequence;
  const { points, box } = state.prompt;
  if (!points.length && !box) {
    clearMask();
    state.masks += 1;
    document.body.dataset.masks = String(state.masks);
    return;
  }
  await busy(async () => {
    const response = await sessionCall(() => api(`/sessions/${state.session.session_id}/segment?answer=png`, {
      method: "POST", json: { points, box }, accept: "image/png",
    }));
    const blob = await response.blob();
    if (asked !== state.sequence) return; // a later click's answer is on its way
    await paintMask(blob);
    const iou = Number(response.headers.get("X-Craftai-Predicted-Iou"));
    const share = Number(response.headers.get("X-Craftai-Selected-Fraction"));
    $("mask-caption").textContent = response.headers.get("X-Craftai-Empty") === "true"
      ? "nothing selected" : `${(share * 100).toFixed(1)} % of the picture, predicted IoU ${iou.toFixed(3)}`;
    const download = $("download-selection");
    download.href = url("selection", blob);
    download.hidden = false;
    state.masks += 1;
    document.body.dataset.masks = String(state.masks);
  });
}

// -- everything --------------------------------------------------------------------------------

async function sessionCall(ask) {
  // A call on the page's session, opened (again) when the server does not have it.
  if (!state.session) await openSession();
  try {
    return await ask();
  } catch (error) {
    if (error.status !== 404 || error.reason !== Reason.SESSION_NOT_FOUND) throw error;
    await openSession(); // the server forgot it (idle, memory, restart): send the picture again
    return ask();
  }
}

async function paintEverything(masks) {
  // Every object in its own colour; smaller ones drawn last, over the larger ones they lie on.
  const overlay = $("overlay");
  const { width, height } = overlay;
  const out = new ImageData(width, height);
  const scratch = new OffscreenCanvas(width, height);
  const context = scratch.getContext("2d", { willReadFrequently: true });
  const ordered = masks.map((mask, i) => [mask, i]).sort((a, b) => b[0].area - a[0].area);
  for (const [mask, i] of ordered) {
    const picture = await createImageBitmap(new Blob([bytes(mask.png)], { type: "image/png" }));
    context.clearRect(0, 0, width, height);
    context.drawImage(picture, 0, 0);
    const data = context.getImageData(0, 0, width, height).data;
    const [r, g, b] = PALETTE[i % PALETTE.length];
    for (let p = 0; p < data.length; p += 4) {
      if (data[p] > 0) {
        out.data[p] = r; out.data[p + 1] = g; out.data[p + 2] = b; out.data[p + 3] = MASK_RGBA[3];
      }
    }
  }
  overlay.getContext("2d").putImageData(out, 0, 0);
}

async function everything() {
  await busy(async () => {
    await leaveFix(); // select's: the cutout's picture is let go first (an app may keep as few as one)
    setSelecting(false);
    state.prompt = { points: [], box: null };
    state.history = [];
    drawMarks();
    const options = { formats: ["png"] };
    for (const [id, name] of [["everything-side", "points_per_side"], ["everything-iou", "pred_iou_thresh"],
      ["everything-stability", "stability_score_thresh"]]) {
      if ($(id).value !== "") options[name] = Number($(id).value);
    }
    const bar = $("everything-progress");
    bar.removeAttribute("value");
    bar.hidden = false;
    let result = null;
    try {
      const response = await sessionCall(() => api(`/sessions/${state.session.session_id}/everything`, {
        method: "POST", json: options, accept: "text/event-stream",
      }));
      await readEvents(response, (name, data) => {
        if (name === "progress" && data.stage === "points") {
          bar.max = data.total || 1;
          bar.value = data.done;
          document.body.dataset.everythingProgress = `${data.done}/${data.total}`;
        } else if (name === "result") {
          result = data;
        }
      });
    } finally {
      bar.hidden = true;
    }
    if (!result) throw new Error("the gateway's answer ended before its result: try again");
    await paintEverything(result.masks);
    $("download-selection").hidden = true;
    $("mask-caption").textContent = `${result.masks.length} objects (of ${result.candidates} candidates from ` +
      `${result.points} clicks), ${ms(result.timing_ms)}`;
    state.masks += 1;
    document.body.dataset.masks = String(state.masks);
    document.body.dataset.everything = String(result.masks.length);
  });
  await refreshStatus();
}

// -- camera: the live cutout ----------------------------------------------------------------------
// The camera's frames drawn to a canvas and sent as JPEG over the frame stream (WebSocket
// /api/v1/frames, docs/WEB.md): the options (and the key: a page cannot set a WebSocket's headers)
// first, then at most CAMERA_AHEAD frames unanswered (the next is sent as an answer comes). Each
// answer's cutout is laid over the chosen background here, as a changed background is after a run.
const CAMERA_AHEAD = 2;

function cameraRefused(error) {
  if (!navigator.mediaDevices) return new Error("This browser offers no camera to this page (it needs https or localhost).");
  if (error.name === "NotAllowedError") return new Error("The camera was refused: allow it for this page, then press Camera again.");
  return new Error("No camera was found, or another program is using it.");
}

async function toggleCamera() {
  if (state.camera) return stopCamera();
  showError(null);
  let media;
  const video = document.createElement("video");
  try {
    media = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 }, audio: false });
    Object.assign(video, { srcObject: media, muted: true, playsInline: true });
    await video.play();
  } catch (error) {
    for (const track of media ? media.getTracks() : []) track.stop();
    showError(cameraRefused(error));
    document.body.dataset.camera = "refused";
    return;
  }
  const camera = { media, video, sent: [], pending: null, ahead: 0, shown: 0 };
  camera.sending = camera.drawing = Promise.resolve();
  camera.capture = new OffscreenCanvas(video.videoWidth, video.videoHeight); // every frame at the first one's size
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  camera.socket = new WebSocket(`${scheme}://${location.host}${API}/frames`);
  camera.socket.binaryType = "blob";
  camera.socket.onopen = () => camera.socket.send(JSON.stringify({
    key: state.key || undefined, app_id: state.appId || undefined, ...state.chosen["image.matte"],
    outputs: "cutout", naive: $("naive").checked, in_flight: CAMERA_AHEAD,
  }));
  camera.socket.onmessage = (message) => cameraMessage(camera, message.data);
  camera.socket.onclose = () => {
    if (state.camera === camera && $("error").hidden) showError(new Unreachable());
    if (state.camera === camera) stopCamera();
  };
  state.camera = camera;
  $("camera").setAttribute("aria-pressed", "true");
  $("camera").textContent = "Stop camera";
  $("camera-caption").textContent = "starting…";
  $("camera-view").hidden = false;
  document.body.dataset.camera = "on";
}

function cameraMessage(camera, data) {
  if (state.camera !== camera) return;
  if (data instanceof Blob) { // an output of the frame announced last, in the order it listed them
    const { frame, blobs } = camera.pending;
    blobs[frame.outputs[Object.keys(blobs).length].name] = data;
    if (Object.keys(blobs).length < frame.outputs.length) return;
    camera.ahead -= 1;
    sendFrame(camera);
    camera.drawing = camera.drawing.then(() => showCameraFrame(camera, frame, blobs, camera.sent.shift()))
      .catch(showError);
    return;
  }
  const answer = JSON.parse(data);
  if (answer.started) {
    $("camera-caption").textContent = `${answer.started.recipe} / ${answer.started.engine} on ${answer.started.device}`;
    for (let i = 0; i < CAMERA_AHEAD; i += 1) sendFrame(camera);
  } else if (answer.progress) {
    $("camera-caption").textContent = `${answer.progress.stage}: ${answer.progress.message}`;
  } else if (answer.frame) {
    camera.pending = { frame: answer.frame, blobs: {} };
  } else if (answer.error) {
    const error = new ApiError(answer.error.status, answer);
    if (error.status === 401 || error.status === 403) $("key-panel").hidden = false;
    showError(error);
    stopCamera();
  }
}

function sendFrame(camera) {
  // One frame captured and sent, after those before it (they share the capture canvas).
  if (state.camera !== camera || camera.ahead >= CAMERA_AHEAD) return;
  camera.ahead += 1;
  camera.sending = camera.sending.then(async () => {
    const { capture, video } = camera;
    capture.getContext("2d").drawImage(video, 0, 0, capture.width, capture.height);
    camera.sent.push(await createImageBitmap(capture)); // the frame again, for a blurred background
    const jpeg = await capture.convertToBlob({ type: "image/jpeg", quality: 0.85 });
    if (state.camera === camera) camera.socket.send(jpeg);
  });
}

async function showCameraFrame(camera, frame, blobs, source) {
  const cutout = await createImageBitmap(blobs.cutout);
  const kind = $("background").value;
  const backdrop = kind === "none" || (kind === "picture" && !backgroundPicture())
    ? null : await backdropOf(kind, cutout.width, cutout.height, source);
  source?.close();
  if (state.camera !== camera) return;
  const canvas = $("camera-cutout");
  Object.assign(canvas, { width: cutout.width, height: cutout.height });
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  if (backdrop) context.drawImage(backdrop, 0, 0);
  context.drawImage(cutout, 0, 0);
  camera.shown += 1;
  $("camera-caption").textContent = `frame ${frame.index + 1}: ${frame.recipe} / ${frame.engine} on ${frame.device}, ` +
    ms(frame.timing_ms);
  document.body.dataset.cameraFrames = String(camera.shown);
}

function stopCamera() {
  // The socket closed: the gateway cancels the stream on the services.
  const camera = state.camera;
  if (!camera) return;
  state.camera = null;
  camera.socket.close(1000);
  for (const track of camera.media.getTracks()) track.stop();
  camera.video.srcObject = null;
  for (const bitmap of camera.sent) bitmap.close();
  $("camera").setAttribute("aria-pressed", "false");
  $("camera").textContent = "Camera";
  document.body.dataset.camera = "stopped";
}

function pictureXY(event) {
  const canvas = $("marks");
  const rect = canvas.getBoundingClientRect();
  return {
    x: Math.min(Math.max((event.clientX - rect.left) * (canvas.width / rect.width), 0), canvas.width),
    y: Math.min(Math.max((event.clientY - rect.top) * (canvas.height / rect.height), 0), canvas.height),
  };
}

function listen() {
  const marks = $("marks");
  let start = null;
  marks.addEventListener("contextmenu", (event) => event.preventDefault());
  marks.addEventListener("pointerdown", (event) => {
    if (!state.selecting && !state.fixing) return;
    start = {
      ...pictureXY(event), button: event.button, background: event.shiftKey || event.altKey || event.ctrlKey,
      fixing: state.fixing,
    };
    marks.setPointerCapture(event.pointerId);
  });
  marks.addEventListener("pointerup", (event) => {
    if (!start) return;
    const end = pictureXY(event);
    const began = start;
    start = null;
    if (began.fixing !== state.fixing || (!began.fixing && !state.selecting)) return; // the mode changed meanwhile
    const moved = Math.hypot(end.x - began.x, end.y - began.y);
    const small = Math.max(4, marks.width / 100);
    const box = [Math.min(began.x, end.x), Math.min(began.y, end.y), Math.max(began.x, end.x), Math.max(began.y, end.y)];
    if (state.fixing) { // left: keep; right (or Shift): remove; a click's region or a box's
      const action = began.button === 0 && !began.background ? CutoutAction.KEEP : CutoutAction.REMOVE;
      fixPrompt(moved > small ? { action, box } : { action, points: [[began.x, began.y]] });
    } else if (moved > small) {
      change({ points: state.prompt.points, box });
    } else {
      const foreground = began.button === 0 && !began.background;
      change({ points: [...state.prompt.points, { x: began.x, y: began.y, foreground }], box: state.prompt.box });
    }
  });

  $("file").addEventListener("change", (event) => choose(event.target.files[0]));
  const drop = $("drop");
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    choose(event.dataTransfer.files[0]);
  });
  $("remove").addEventListener("click", removeBackground);
  for (const subject of Subjects) $("subject").append(new Option(subject, subject));
  $("subject").addEventListener("change", renderAdvice);
  for (const [id, event] of [["background", "change"], ["bg-color", "input"], ["bg-blur", "change"], ["bg-file", "change"]]) {
    $(id).addEventListener(event, recompose);
  }
  $("fix").addEventListener("click", toggleFix);
  $("select").addEventListener("click", toggleSelect);
  $("everything").addEventListener("click", everything);
  $("camera").addEventListener("click", toggleCamera);
  $("undo").addEventListener("click", () => {
    if (state.fixing) {
      fixUndo();
      return;
    }
    if (!state.history.length) return;
    state.prompt = state.history.pop();
    setSelecting(true);
    drawMarks();
    segment();
  });
  $("clear").addEventListener("click", () => (state.fixing ? fixClear() : change({ points: [], box: null })));
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = $("key-input").value.trim();
    state.appId = $("app-input").value.trim();
    $("key-panel").hidden = true;
    busy(loadStatus);
  });
  window.addEventListener("pagehide", () => {
    stopCamera();
    forgetSession();
    leaveFix();
    forget();
  });
}

// What the page's tests read (and a curious developer's console): the prompt as sent.
window.craftaiPage = state;

takeKeyFromLink();
listen();
busy(loadStatus).then(() => { document.body.dataset.ready = "true"; });
