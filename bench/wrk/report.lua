-- What every wrk script of bench/run.py shares, loaded by each with dofile() before it defines
-- init() and request(): each thread is numbered (the global `tid`), every answer outside 2xx
-- is counted (`bad`, and the first such status in `first_bad`), and done() prints the one
-- line run.py reads: BENCH_RESULT {json} with wrk's figures and the counts of all threads.

-- setup() and done() run in wrk's main Lua state, each thread's init(), request() and
-- response() in that thread's own state: done() reads a thread's counts with thread:get().
local threads = {}

-- Run in every state when the script is loaded, so before init(); threads start at 0.
bad = 0
first_bad = ""

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = bad + 1
    if first_bad == "" then first_bad = tostring(status) end
  end
end

function done(summary, latency, requests)
  local total, example = 0, ""
  for _, thread in ipairs(threads) do
    total = total + thread:get("bad")
    if example == "" then example = thread:get("first_bad") end
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests": %d, "duration_us": %d, "bytes": %d, "non2xx": %d, ' ..
    '"first_non2xx": "%s", "connect": %d, "read": %d, "write": %d, "timeout": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, total, example, errors.connect,
    errors.read, errors.write, errors.timeout, latency:percentile(50), latency:percentile(99),
    latency.mean, latency.max))
end
