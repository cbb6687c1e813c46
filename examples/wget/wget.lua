-- wget on moonflow: `moonflow run examples/wget/wget.lua URL`.
--
-- Fetches URL (http:// or https://, following up to 3 redirects) and
-- writes the status line and the response headers (sorted by name) on
-- stderr, the body on stdout, so `> page.html` keeps the page alone. Exit
-- status: 0 for any HTTP answer, 1 when none came (the reason on stderr),
-- 2 for a usage error.
local mf = require "moonflow"

local url = ...
if select("#", ...) ~= 1 or not url:match("^https?://") then
    io.stderr:write("usage: moonflow run examples/wget/wget.lua http[s]://HOST[:PORT][/PATH]\n")
    return 2 -- the main chunk's number is moonflow's exit status
end

-- One wait: the coroutine parks until the answer (or the failure) is in.
local res, err = mf.http.get(url, { redirects = 3, timeout = 30000 })
if not res then
    io.stderr:write(("wget: %s: %s\n"):format(url, err))
    return 1
end

local names = {}
for name in pairs(res.headers) do names[#names + 1] = name end
table.sort(names)
local head = { ("HTTP %d %s"):format(res.status, res.url) }
for _, name in ipairs(names) do
    head[#head + 1] = name .. ": " .. res.headers[name]
end
io.stderr:write(table.concat(head, "\n"), "\n\n")
io.stdout:write(res.body)
