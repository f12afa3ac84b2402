-- GET requests for bench/run.py: each request takes a random line of the file BENCH_PATHS (one
-- path with its query string per line); BENCH_API_KEY, when set, is sent as a bearer key.
-- Counting and the result line are report.lua's, beside this file.

-- wrk loads a script by the path it was given, not from the script's folder: find report.lua
-- from this file's own path.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")

function init(args)
  paths = {}
  for line in io.lines(os.getenv("BENCH_PATHS")) do
    if #line > 0 then paths[#paths + 1] = line end
  end
  if #paths == 0 then error("no paths in " .. os.getenv("BENCH_PATHS")) end
  local key = os.getenv("BENCH_API_KEY")
  headers = {}
  if key and #key > 0 then headers["Authorization"] = "Bearer " .. key end
  math.randomseed(os.time() * 97 + tid)
end

function request()
  return wrk.format("GET", paths[math.random(#paths)], headers)
end
