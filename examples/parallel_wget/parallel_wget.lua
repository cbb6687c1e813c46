-- parallel wget on moonflow:
--   moonflow run examples/parallel_wget/parallel_wget.lua URL [URL...]
--
-- Fetches every URL side by side (one mf.task.http each in an
-- mf.parallel: the script waits once, for all of them), then prints one
-- line per URL, in the order given: the URL, a tab, and either the HTTP
-- status and the body's length in bytes, or "failed" and the reason.
-- Exit status: 0 when every URL got an HTTP answer, 1 otherwise, 2 for a
-- usage error.
local mf = require "moonflow"

local urls = { ... }
if #urls == 0 then
    io.stderr:write("usage: moonflow run examples/parallel_wget/parallel_wget.lua URL [URL...]\n")
    return 2 -- the main chunk's number is moonflow's exit status
end

local fetches = {}
for i, url in ipairs(urls) do
    fetches[i] = mf.task.http { url = url, redirects = 3, timeout = 30000 }
end
local results = mf.parallel(fetches):wait()

local failed = false
for i, res in ipairs(results) do
    if res.state == "success" then
        print(("%s\t%d\t%d"):format(urls[i], res.status, #res.body))
    else
        print(("%s\tfailed\t%s"):format(urls[i], res.error or res.state))
        failed = true
    end
end
return failed and 1 or 0
