-- A small redis-cli on moonflow: `moonflow run examples/redis/redis_cli.lua
-- [-u URL] [CMD ARGS...]`. Prints each reply the way redis-cli does on a
-- terminal: "OK", "(integer) 1", "(nil)", "(error) ERR ...", quoted bulk
-- strings with escapes, numbered (nested) arrays. Without CMD it reads one
-- command per line from stdin (words, "double quoted" with \n \xHH ...
-- escapes, or 'single quoted'). URL defaults to $REDIS_URL or
-- redis://127.0.0.1:6379/0. Exits 1 when the server cannot be reached, 2
-- (the usage on stderr) for a bad command line.
local mf = require "moonflow"

-- `moonflow serve examples/redis` would load this file as the route
-- /redis_cli: answer 404 there instead of reading the server's stdin.
if not arg then
    return function(_, resp)
        resp.status = 404
        resp:send("redis_cli.lua is a command: moonflow run " ..
            "examples/redis/redis_cli.lua [-u URL] CMD ARGS...\n")
    end
end

local escapes = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n",
                  ["\r"] = "\\r", ["\t"] = "\\t", ["\a"] = "\\a",
                  ["\b"] = "\\b" }

local function quote(s)
    local body = s:gsub('[%c"\\\128-\255]', function(c)
        return escapes[c] or ("\\x%02x"):format(c:byte())
    end)
    return '"' .. body .. '"'
end

-- One reply as text ending in a newline; prefix indents the lines after
-- the first of a nested array.
local function format(v, prefix)
    if v == mf.null then return "(nil)\n" end
    if type(v) == "number" then return ("(integer) %.0f\n"):format(v) end
    if type(v) == "string" then return quote(v) .. "\n" end
    if v.ok then return v.ok .. "\n" end
    if v.err then return "(error) " .. v.err .. "\n" end
    if #v == 0 then return "(empty array)\n" end
    local width = #tostring(#v)
    local inner = prefix .. (" "):rep(width + 2)
    local out = {}
    for i = 1, #v do
        out[i] = ("%s%" .. width .. "d) %s"):format(i == 1 and "" or prefix, i,
            format(v[i], inner))
    end
    return table.concat(out)
end

local unquote = { n = "\n", r = "\r", t = "\t", b = "\b", a = "\a" }

-- "double quoted" text starting after the quote at i: the string and the
-- index after the closing quote, or nil.
local function double_quoted(line, i)
    local buf = {}
    while i <= #line do
        local c = line:sub(i, i)
        if c == '"' then return table.concat(buf), i + 1 end
        if c == "\\" then
            local hex = line:match("^x(%x%x)", i + 1)
            if hex then
                c, i = string.char(tonumber(hex, 16)), i + 3
            else
                local n = line:sub(i + 1, i + 1)
                c, i = unquote[n] or n, i + 1
            end
        end
        buf[#buf + 1] = c
        i = i + 1
    end
end

-- A line's words, as redis-cli splits them; nil on unbalanced quotes.
local function split(line)
    local args, i = {}, 1
    while true do
        i = line:find("%S", i)
        if not i then return args end
        local c, word = line:sub(i, i), nil
        if c == '"' then
            word, i = double_quoted(line, i + 1)
        elseif c == "'" then
            local j = line:find("'", i + 1, true)
            if j then word, i = line:sub(i + 1, j - 1), j + 1 end
        else
            local j = line:find("%s", i) or #line + 1
            word, i = line:sub(i, j - 1), j
        end
        if not word then return nil end
        args[#args + 1] = word
    end
end

-- Prints the reply to cmd; false (and why on stderr) when no reply came.
local function run(r, url, cmd)
    local res, err = r:pipeline { cmd }
    if not res then
        io.stderr:write(("Could not connect to Redis at %s: %s\n"):format(url, err))
        return false
    end
    io.stdout:write(format(res[1], ""))
    io.stdout:flush()
    return true
end

-- The main chunk's number is moonflow's exit status.
local args = { ... }
local url = os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0"
if args[1] == "-u" then
    if not args[2] then
        io.stderr:write("usage: moonflow run examples/redis/redis_cli.lua",
            " [-u URL] [CMD ARGS...]\n")
        return 2
    end
    url = args[2]
    table.remove(args, 1)
    table.remove(args, 1)
end
local r = mf.redis(url, { status_table = true })

if #args > 0 then
    return run(r, url, args) and 0 or 1
end
for line in io.lines() do
    local cmd = split(line)
    if not cmd then
        io.stdout:write("Invalid argument(s)\n")
    elseif #cmd > 0 and not run(r, url, cmd) then
        return 1
    end
end
