// The call over WebRTC: the character's video and voice as tracks of one stream (the browser keeps them
// in sync), the microphone as a track, the protocol's JSON messages on a data channel.
// Signalling is one GET /v1/rtc?offer=... (the offer raw-deflated and base64url-encoded: the server's
// HTTP takes no request body); its answer is JSON {type, sdp}. Throws if any step fails, so the caller
// can fall back to the WebSocket.

const GATHER_MS = 3000; // ICE candidates go in the offer (no trickle): wait this long at most for them
const OPEN_MS = 10000; // the data channel must open this soon, or the call goes over the WebSocket

async function deflateBase64url(text) {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  const bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function gathered(pc) {
  return new Promise((resolve) => {
    if (pc.iceGatheringState === "complete") { resolve(); return; }
    const timer = setTimeout(resolve, GATHER_MS);
    pc.addEventListener("icegatheringstatechange", () => {
      if (pc.iceGatheringState === "complete") { clearTimeout(timer); resolve(); }
    });
  });
}

function opened(channel) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the data channel did not open")), OPEN_MS);
    channel.onopen = () => { clearTimeout(timer); resolve(); };
  });
}

// RTP timestamps of the video track, related to the frames' pts_ms by the server's rtc.video_clock.
export class VideoClock {
  constructor() { this.clock = null; }
  set(message) { this.clock = message; }
  // pts_ms of the frame with this RTP timestamp (null until the clock is known).
  ptsMs(rtpTimestamp) {
    if (!this.clock || rtpTimestamp === undefined) return null;
    const ticks = (rtpTimestamp - this.clock.rtp_timestamp) >>> 0; // 32-bit wrap-around
    return this.clock.pts_ms + (ticks * 1000) / this.clock.clock_rate;
  }
}

// Connects; `video` is the <video> element that plays the call. Returns {pc, channel, send, setMic, close}.
export async function connectRtc({ token, video, onMessage, onClose }) {
  const pc = new RTCPeerConnection({ iceServers: [] });
  const microphone = pc.addTransceiver("audio", { direction: "sendrecv" });
  pc.addTransceiver("video", { direction: "recvonly" });
  const channel = pc.createDataChannel("onstage", { ordered: true });
  pc.ontrack = (e) => { if (video.srcObject !== e.streams[0]) video.srcObject = e.streams[0]; };
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const url = new URL("/v1/rtc", location.href);
    url.searchParams.set("offer", await deflateBase64url(pc.localDescription.sdp));
    if (token) url.searchParams.set("token", token);
    const response = await fetch(url, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status}: ${(await response.text()).trim()}`);
    await pc.setRemoteDescription(await response.json());
    await opened(channel);
  } catch (err) {
    pc.close();
    throw err;
  }
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    pc.close();
    onClose();
  };
  channel.onmessage = (e) => { if (typeof e.data === "string") onMessage(JSON.parse(e.data)); };
  channel.onclose = close;
  pc.onconnectionstatechange = () => { if (["failed", "closed"].includes(pc.connectionState)) close(); };
  return {
    pc,
    channel,
    send: (message) => { if (channel.readyState === "open") channel.send(JSON.stringify(message)); },
    setMic: (track) => microphone.sender.replaceTrack(track),
    close,
  };
}
