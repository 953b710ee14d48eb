// Microphone -> PCM16 mono at 16 kHz, posted every 20 ms (320 samples). Resampling is linear
// interpolation from the context's rate, which is plenty for speech detection and recognition.
class Pcm16At16k extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / 16000;
    this.pos = 0;
    this.out = new Int16Array(320);
    this.n = 0;
    this.prev = 0;
  }

  process(inputs) {
    const input = inputs[0][0];
    if (!input) return true;
    for (let i = 0; i < input.length; i++) {
      const current = input[i];
      while (this.pos <= 1) {
        const value = this.prev + (current - this.prev) * this.pos;
        this.out[this.n++] = Math.max(-32768, Math.min(32767, Math.round(value * 32768)));
        if (this.n === this.out.length) {
          this.port.postMessage(this.out.buffer.slice(0));
          this.n = 0;
        }
        this.pos += this.step;
      }
      this.pos -= 1;
      this.prev = current;
    }
    return true;
  }
}
registerProcessor("pcm16-at-16k", Pcm16At16k);
