// The user's camera, only with their consent (the Camera button, or ?camera=1): MediaPipe's hand and face
// models run here in the page, on the CPU, and only their landmarks leave it, as `input.landmarks`
// messages, a dozen times a second at most. No picture is kept or sent. The models' scripts, wasm and
// weights are served by onstage itself (/static/vendor/, installed by scripts/setup-page).
// Just before the models look at a frame, the page fires `onstage:camera-frame` on window (detail: the
// frame's t_ms), so that a test can tell which picture of the camera they saw.

const MAX_HZ = 12; // frames looked at per second, at most: enough for a wave, cheap for the CPU
const VENDOR = "/static/vendor";

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`could not load ${src} (are the models installed? scripts/setup-page)`));
    document.head.append(script);
  });
}

// Landmarks as the user sees themselves (a mirror, like every video call's own picture): x to the right,
// y down, 0..1, four decimals.
function points(landmarks) {
  return landmarks.map((p) => [Math.round((1 - p.x) * 1e4) / 1e4, Math.round(p.y * 1e4) / 1e4]);
}

export class Camera {
  constructor({ send, log, video }) {
    this.send = send;
    this.log = log;
    this.video = video; // the user's own picture, shown small and mirrored
    this.stream = null;
    this.models = null;
    this.figures = { frames: 0, sent: 0, hands: 0, faces: 0 };
    this.seenBefore = false;
  }

  get on() { return this.stream !== null; }

  async start() {
    if (this.on) return;
    const stream = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 } });
    this.stream = stream;
    this.video.srcObject = stream;
    this.video.hidden = false;
    await this.video.play();
    try {
      this.models = this.models || await this.loadModels();
    } catch (err) {
      this.stop();
      throw err;
    }
    this.log("camera on: hands and face are tracked in this page; only their landmarks are sent");
    this.loop(stream);
  }

  stop() {
    if (!this.stream) return;
    for (const track of this.stream.getTracks()) track.stop();
    this.stream = null;
    this.video.srcObject = null;
    this.video.hidden = true;
    this.log("camera off");
  }

  async loadModels() {
    await loadScript(`${VENDOR}/hands/hands.js`);
    await loadScript(`${VENDOR}/face_detection/face_detection.js`);
    const models = { hand: null, face: null };
    // useCpuInference: the models run with XNNPACK on the CPU; on a machine without a GPU (and in headless
    // Chromium) WebGL inference is emulated and takes about 20 times as long.
    const hands = new window.Hands({ locateFile: (f) => `${VENDOR}/hands/${f}` });
    hands.setOptions({ useCpuInference: true, maxNumHands: 1, modelComplexity: 0, minDetectionConfidence: 0.5, minTrackingConfidence: 0.5 });
    hands.onResults((r) => { models.hand = r.multiHandLandmarks && r.multiHandLandmarks[0] || null; });
    const face = new window.FaceDetection({ locateFile: (f) => `${VENDOR}/face_detection/${f}` });
    face.setOptions({ useCpuInference: true, model: "short", minDetectionConfidence: 0.5 });
    face.onResults((r) => { models.face = r.detections && r.detections[0] ? r.detections[0].landmarks : null; });
    await hands.initialize();
    await face.initialize();
    models.look = async (image) => {
      models.hand = null;
      models.face = null;
      await hands.send({ image });
      await face.send({ image });
    };
    return models;
  }

  async loop(stream) {
    while (this.stream === stream) {
      const started = performance.now();
      if (this.video.readyState >= 2) {
        const tMs = Math.round(performance.now() * 10) / 10;
        window.dispatchEvent(new CustomEvent("onstage:camera-frame", { detail: { t_ms: tMs } }));
        await this.models.look(this.video);
        if (this.stream !== stream) break;
        this.report(tMs);
      }
      const wait = 1000 / MAX_HZ - (performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));
    }
  }

  // One frame's landmarks to the server: when it saw a hand or a face, and once more after it saw none,
  // so that the server's history of them ends.
  report(tMs) {
    const { hand, face } = this.models;
    const figures = this.figures;
    figures.frames += 1;
    figures.hands += hand ? 1 : 0;
    figures.faces += face ? 1 : 0;
    const seen = Boolean(hand || face);
    if (seen || this.seenBefore) {
      this.send({
        type: "input.landmarks",
        t_ms: tMs,
        hand: hand ? points(hand) : null,
        face: face ? points(face) : null,
      });
      figures.sent += 1;
    }
    this.seenBefore = seen;
  }
}
