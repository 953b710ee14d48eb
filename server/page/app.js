// The onstage browser client: protocol v1 over WebRTC when it can (rtc.js), else over one WebSocket.
// Over the WebSocket, video and voice are played by their presentation time behind a small jitter buffer
// and the microphone is captured with an AudioWorklet and sent as PCM16 at 16 kHz. Over WebRTC the browser
// plays the tracks (in sync) and each frame it shows is drawn onto the same canvas.
// ?transport=ws or ?transport=rtc uses that one only.
import { Camera } from "/static/camera.js";
import { connectRtc, VideoClock } from "/static/rtc.js";

const JITTER_MS = 120; // played this long after the first frame arrived, so small network gaps do not show
const $ = (id) => document.getElementById(id);
const log = (text) => {
  const item = document.createElement("li");
  item.textContent = `${(performance.now() / 1000).toFixed(2)}s ${text}`;
  $("log").prepend(item);
  while ($("log").children.length > 200) $("log").lastChild.remove();
};

const state = {
  ws: null, rtc: null, transport: null, audio: null, started: null, outRate: 24000, playStart: null,
  framesDrawn: 0, mic: null, lastAudioEnd: 0, scene: {}, // scene: the parts the shown chunk names
  videoClock: new VideoClock(), reflecting: [], // chunks whose reflects the page logs when it shows them
};
window.onstage = state; // for tests and the curious

function send(message) {
  if (state.rtc) state.rtc.send(message);
  else if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(message));
}

function setLive(live) {
  for (const el of document.querySelectorAll("#gestures button, #say input, #say button, #interrupt, #mic, #camera")) {
    el.disabled = !live;
  }
  $("connect").textContent = live ? "End call" : "Start call";
}

function splitMedia(buffer) {
  const view = new DataView(buffer);
  const kind = view.getUint8(0);
  const length = view.getUint32(1, false);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 5, length)));
  return { kind, header, payload: buffer.slice(5 + length) };
}

// The media clock: pts 0 plays at playStart (AudioContext time), set by the first frame plus the jitter buffer.
function playTime(ptsMs) {
  if (state.playStart === null) state.playStart = state.audio.currentTime + JITTER_MS / 1000 - ptsMs / 1000;
  return state.playStart + ptsMs / 1000;
}

async function onVideo(header, payload) {
  const bitmap = await createImageBitmap(new Blob([payload], { type: "image/jpeg" }));
  const delay = (playTime(header.pts_ms) - state.audio.currentTime) * 1000;
  setTimeout(() => {
    const canvas = $("screen");
    if (canvas.width !== header.width || canvas.height !== header.height) sizeScreen(header);
    canvas.getContext("2d").drawImage(bitmap, 0, 0);
    state.framesDrawn += 1;
    $("frames").textContent = state.framesDrawn;
    if (header.reflects.length) log(`chunk ${header.chunk} reflects ${header.reflects.join(", ")}`);
  }, Math.max(0, delay));
}

// The picture's size is the session's (its model's): session.started names it, each frame repeats it.
function sizeScreen({ width, height }) {
  const canvas = $("screen");
  canvas.width = width;
  canvas.height = height;
}

function onAudio(header, payload) {
  const pcm = new Int16Array(payload);
  if (!pcm.length) return;
  const buffer = state.audio.createBuffer(1, pcm.length, state.outRate);
  const channel = buffer.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) channel[i] = pcm[i] / 32768;
  const source = state.audio.createBufferSource();
  source.buffer = buffer;
  source.connect(state.audio.destination);
  const at = playTime(header.pts_ms);
  if (at >= state.audio.currentTime) source.start(at);
  state.lastAudioEnd = at + pcm.length / state.outRate;
  $("buffered").textContent = `${Math.round((state.lastAudioEnd - state.audio.currentTime) * 1000)} ms`;
}

function onMessage(message) {
  switch (message.type) {
    case "video.chunk": // WebRTC: what the chunk's first frame header would say
    case "video.splice": // WebRTC: what a later frame's header says when a reaction shows from it
      if (message.reflects.length) state.reflecting.push(message);
      break;
    case "rtc.video_clock":
      state.videoClock.set(message);
      break;
    case "session.started":
      state.started = message;
      state.outRate = message.audio_out_rate;
      sizeScreen(message);
      $("status").textContent = `live: ${message.session_id}`;
      $("status").dataset.state = "live";
      setLive(true);
      state.scene = {};
      renderScene();
      log(`session started (${message.width}x${message.height} at ${message.fps} fps)`);
      break;
    case "metrics":
      $("fps").textContent = message.fps.toFixed(1);
      $("ontime").textContent = `${(message.on_time * 100).toFixed(1)} %`;
      $("reaction").textContent = message.reaction_ms_p50 === null
        ? "-" : `${message.reaction_ms_p50} / ${message.reaction_ms_p95} ms`;
      break;
    case "scene.changed":
      showScene(message);
      log(`scene from chunk ${message.chunk}: ${JSON.stringify(message.scene)}`);
      break;
    case "story.state":
      renderStory(message);
      log(`story at ${message.node}`);
      break;
    case "input.outcome":
      log(`input ${message.event_id} will not show (${message.reason}): ${message.detail}`);
      break;
    case "error":
      log(`error ${message.code}: ${message.message}`);
      if (message.fatal) { $("status").textContent = message.message; $("status").dataset.state = "error"; }
      break;
    default:
      log(`${message.type} ${JSON.stringify(message).slice(0, 160)}`);
  }
}

// The scene the picture shows: each part the model draws (capabilities.scene, the first choice its default)
// with its choice now. A scene.changed names the parts its chunk sets (the others are at their defaults)
// and takes effect when that chunk's first frame plays; hidden for a model that draws no scene.
function showScene(message) {
  const apply = () => { state.scene = message.scene; renderScene(); };
  const delay = state.transport === "ws" && state.audio
    ? (playTime(message.pts_ms) - state.audio.currentTime) * 1000 : 0;
  setTimeout(apply, Math.max(0, delay));
}

function renderScene() {
  const parts = (state.started && state.started.capabilities.scene) || {};
  const list = $("scene");
  list.replaceChildren();
  for (const [part, choices] of Object.entries(parts)) {
    const name = document.createElement("dt");
    name.textContent = part;
    const choice = document.createElement("dd");
    choice.id = `scene-${part}`;
    choice.textContent = (state.scene && state.scene[part]) || choices[0];
    list.append(name, choice);
  }
  $("scene-panel").hidden = Object.keys(parts).length === 0;
}

function renderStory(story) {
  const box = $("story");
  box.replaceChildren();
  const beat = document.createElement("p");
  beat.textContent = `Beat: ${story.node}`;
  const choices = document.createElement("div");
  choices.className = "choices";
  for (const choice of story.choices) {
    const button = document.createElement("button");
    button.textContent = choice.label || choice.id;
    button.onclick = () => send({ type: "story.choose", choice: choice.id });
    choices.append(button);
  }
  const form = document.createElement("form");
  const input = document.createElement("input");
  input.placeholder = "Step into the story...";
  form.append(input);
  form.onsubmit = (e) => { e.preventDefault(); send({ type: "story.intervene", text: input.value }); input.value = ""; };
  // The history is a tree (a rewind forks it): each node is indented under the node it came from.
  const history = document.createElement("ol");
  const depth = {};
  for (const node of story.history) {
    depth[node.checkpoint] = node.parent ? (depth[node.parent] || 0) + 1 : 0;
    const item = document.createElement("li");
    item.style.marginLeft = `${depth[node.checkpoint]}em`;
    item.textContent = node.checkpoint === story.checkpoint ? `${node.beat} (here)` : node.beat;
    if (node.checkpoint) {
      const rewind = document.createElement("button");
      rewind.textContent = "rewind here";
      rewind.onclick = () => send({ type: "story.rewind", checkpoint: node.checkpoint });
      item.append(" ", rewind);
    }
    history.append(item);
  }
  box.append(beat, choices, form, history);
}

function startMessage(params) {
  // splice: this page reads reflects on every frame, so a reaction may show mid-chunk (docs/protocol.md).
  const start = { type: "session.start", splice: true };
  for (const key of ["character", "plan", "story", "director"]) if (params.get(key)) start[key] = params.get(key);
  if (params.get("seed")) start.seed = Number(params.get("seed"));
  return start;
}

function disconnected() {
  state.camera.stop();
  state.ws = null;
  state.rtc = null;
  state.mic = null;
  setLive(false);
  $("mic").textContent = "Microphone on";
  $("camera").textContent = "Camera on";
  if ($("status").dataset.state !== "error") { $("status").textContent = "not connected"; $("status").dataset.state = "idle"; }
  log("disconnected");
}

async function connect() {
  if (state.ws) { state.ws.close(); return; }
  if (state.rtc) { state.rtc.close(); return; }
  state.audio = state.audio || new AudioContext();
  await state.audio.resume();
  const params = new URLSearchParams(location.search);
  const transport = params.get("transport");
  if (transport !== "ws" && window.RTCPeerConnection) {
    try {
      await connectOverRtc(params);
      return;
    } catch (err) {
      log(`WebRTC: ${err.message}`);
      if (transport === "rtc") { $("status").textContent = "WebRTC failed"; $("status").dataset.state = "error"; return; }
      log("using the WebSocket instead");
    }
  }
  connectOverWs(params);
}

async function connectOverRtc(params) {
  const video = $("remote");
  state.videoClock = new VideoClock();
  state.reflecting = [];
  state.rtc = await connectRtc({ token: params.get("token"), video, onMessage, onClose: disconnected });
  state.transport = "rtc";
  $("screen").hidden = true;
  video.hidden = false;
  video.requestVideoFrameCallback(onRtcFrame);
  log("connected over WebRTC");
  send(startMessage(params));
  if (params.get("mic") === "1") startMic();
  if (params.get("camera") === "1") toggleCamera();
}

// Each frame the video element shows: drawn onto the canvas (the page's one picture, for tests and
// screenshots), counted, and the reflects of its chunk logged when it is the chunk's first frame shown.
function onRtcFrame(now, frame) {
  const video = $("remote");
  if (!state.rtc) return;
  const canvas = $("screen");
  if (canvas.width !== frame.width || canvas.height !== frame.height) sizeScreen(frame);
  canvas.getContext("2d").drawImage(video, 0, 0, canvas.width, canvas.height);
  state.framesDrawn += 1;
  $("frames").textContent = state.framesDrawn;
  const pts = state.videoClock.ptsMs(frame.rtpTimestamp);
  if (pts !== null) {
    const halfFrame = 500 / (state.started ? state.started.fps : 24);
    const shown = state.reflecting.filter((chunk) => chunk.pts_ms <= pts + halfFrame);
    state.reflecting = state.reflecting.filter((chunk) => chunk.pts_ms > pts + halfFrame);
    for (const chunk of shown) log(`chunk ${chunk.chunk} reflects ${chunk.reflects.join(", ")}`);
  }
  video.requestVideoFrameCallback(onRtcFrame);
}

function connectOverWs(params) {
  const token = params.get("token");
  const url = new URL("/v1/session", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (token) url.searchParams.set("token", token);
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.transport = "ws";
  state.playStart = null;
  $("screen").hidden = false;
  $("remote").hidden = true;
  ws.onopen = () => {
    send(startMessage(params));
    if (params.get("mic") === "1") startMic();
    if (params.get("camera") === "1") toggleCamera();
  };
  ws.onmessage = (e) => {
    if (typeof e.data === "string") { onMessage(JSON.parse(e.data)); return; }
    const { kind, header, payload } = splitMedia(e.data);
    if (kind === 2) onVideo(header, payload);
    else if (kind === 3) onAudio(header, payload);
  };
  ws.onclose = disconnected;
}

async function startMic() {
  if (state.mic) { state.mic.disconnect(); state.mic = null; $("mic").textContent = "Microphone on"; return; }
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
  if (state.rtc) {
    const track = stream.getAudioTracks()[0];
    await state.rtc.setMic(track);
    state.mic = { disconnect: () => { state.rtc && state.rtc.setMic(null); track.stop(); } };
    $("mic").textContent = "Microphone off";
    log("microphone on (WebRTC track)");
    return;
  }
  await state.audio.audioWorklet.addModule("/static/mic-worklet.js");
  const source = state.audio.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(state.audio, "pcm16-at-16k");
  node.port.onmessage = (e) => {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    const frame = new Uint8Array(1 + e.data.byteLength);
    frame[0] = 1;
    frame.set(new Uint8Array(e.data), 1);
    state.ws.send(frame);
  };
  source.connect(node);
  state.mic = node;
  $("mic").textContent = "Microphone off";
  log("microphone on");
}

// The camera is the user's to switch on and off; only landmarks of what it shows are sent (camera.js).
async function toggleCamera() {
  if (state.camera.on) state.camera.stop();
  else {
    try {
      await state.camera.start();
    } catch (err) {
      log(`camera: ${err.message}`);
    }
  }
  $("camera").textContent = state.camera.on ? "Camera off" : "Camera on";
}

state.camera = new Camera({ send, log, video: $("self") });
$("camera").onclick = toggleCamera;
$("connect").onclick = connect;
$("mic").onclick = startMic;
$("interrupt").onclick = () => send({ type: "response.interrupt" });
for (const button of document.querySelectorAll("#gestures button")) {
  button.onclick = () => send({ type: "input.gesture", gesture: button.dataset.gesture });
}
$("say").onsubmit = (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (text) send({ type: "input.text", text });
  $("text").value = "";
};
if (new URLSearchParams(location.search).get("autostart") === "1") connect();
