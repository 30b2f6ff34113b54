// A text/event-stream parser (the WHATWG "event stream interpretation"), bounded: the stream comes from the
// network and is not trusted.

import { WarrenError } from "./errors.js";

/** One dispatched event. */
export interface SSEEvent {
  event: string;
  data: string;
}

/** The largest line or event data the parser buffers (16 MiB, as the Go SDK). */
export const maxSSEEvent = 16 << 20;

/**
 * SSEParser takes the stream's text in chunks of any size and returns the events each chunk completes.
 * Lines end in CRLF, LF or CR; ':' starts a comment; one space after "field:" is dropped; an empty line
 * dispatches the event unless it has no data. A line or an event's data above max throws `invalid_argument`.
 */
export class SSEParser {
  private buf = "";
  private skipLF = false;
  private started = false;
  private event = "";
  private data: string[] = [];
  private dataLen = 0;

  constructor(private max = maxSSEEvent) {}

  push(chunk: string): SSEEvent[] {
    const out: SSEEvent[] = [];
    if (!this.started && (this.buf + chunk).length > 0) {
      chunk = (this.buf + chunk).replace(/^\uFEFF/, "");
      this.buf = "";
      this.started = true;
    }
    this.buf += chunk;
    let i = 0;
    for (;;) {
      if (this.skipLF && i < this.buf.length) {
        if (this.buf[i] === "\n") i++;
        this.skipLF = false;
      }
      let j = i;
      while (j < this.buf.length && this.buf[j] !== "\n" && this.buf[j] !== "\r") j++;
      if (j === this.buf.length) break;
      const line = this.buf.slice(i, j);
      if (this.buf[j] === "\r") this.skipLF = true;
      i = j + 1;
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    this.buf = this.buf.slice(i);
    if (this.buf.length > this.max) throw new WarrenError("invalid_argument", `server-sent event line over ${this.max} characters`);
    return out;
  }

  private line(line: string): SSEEvent | undefined {
    if (line === "") {
      const ev = this.data.length ? { event: this.event || "message", data: this.data.join("\n") } : undefined;
      this.event = "";
      this.data = [];
      this.dataLen = 0;
      return ev;
    }
    if (line.startsWith(":")) return undefined;
    const c = line.indexOf(":");
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? "" : line.slice(c + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") {
      this.dataLen += value.length + 1;
      if (this.dataLen > this.max) throw new WarrenError("invalid_argument", `server-sent event data over ${this.max} characters`);
      this.data.push(value);
    }
    return undefined;
  }
}
