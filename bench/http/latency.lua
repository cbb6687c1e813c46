-- bench/http/latency.lua — wrk script used by compare.py.
--
-- wrk --latency prints p50/75/90/99 in rounded human units; compare.py needs
-- p99.9 too, and exact numbers, so done() prints one line of key=value pairs
-- (latencies in microseconds) that the harness parses. The script defines
-- no request() or response(): wrk keeps its fast path, sending one prebuilt
-- request and not handing responses to Lua, so the client costs what plain
-- wrk costs.

done = function(summary, latency, requests)
   local e = summary.errors
   local fields = {
      string.format("requests=%d", summary.requests),
      string.format("duration_us=%d", summary.duration),
      string.format("bytes=%d", summary.bytes),
      string.format("connect_errors=%d", e.connect),
      string.format("read_errors=%d", e.read),
      string.format("write_errors=%d", e.write),
      string.format("timeouts=%d", e.timeout),
      string.format("status_errors=%d", e.status),
      string.format("mean_us=%.1f", latency.mean),
      string.format("max_us=%d", latency.max),
   }
   for _, p in ipairs({ 50, 75, 90, 99, 99.9 }) do
      fields[#fields + 1] = string.format("p%s_us=%d", p, latency:percentile(p))
   end
   io.write("bench-summary ", table.concat(fields, " "), "\n")
end
