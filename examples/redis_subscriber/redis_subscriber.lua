-- A Redis subscriber on moonflow:
--   moonflow run examples/redis_subscriber/redis_subscriber.lua [-u URL]
--       [-n COUNT] [-p PATTERN]... [CHANNEL...]
--
-- Subscribes to each CHANNEL and to each PATTERN (PSUBSCRIBE), then prints
-- what arrives as `redis-cli --raw SUBSCRIBE ...` does: one line per
-- element, "subscribe"/"psubscribe", the name and the count of
-- subscriptions for each confirmation; "message", the channel and the
-- payload for a message ("pmessage" and the pattern first for a pattern's).
-- Runs until COUNT messages came (default: until interrupted). URL
-- defaults to $REDIS_URL, else redis://127.0.0.1:6379/0. Exit status: 0,
-- 1 when the subscription could not be made or ended (the reason on
-- stderr), 2 for a usage error.
local mf = require "moonflow"

local USAGE = "usage: moonflow run examples/redis_subscriber/redis_subscriber.lua"
    .. " [-u URL] [-n COUNT] [-p PATTERN]... [CHANNEL...]\n"

-- The options, or nil for a bad command line.
local function parse_args(argv)
    local o = { url = os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0",
                channels = {}, patterns = {} }
    local i = 1
    while argv[i] do
        local a, v = argv[i], argv[i + 1]
        if a:sub(1, 1) ~= "-" then
            o.channels[#o.channels + 1] = a
            i = i + 1
        else
            if a == "-u" and v then
                o.url = v
            elseif a == "-n" and tonumber(v) then
                o.count = tonumber(v)
            elseif a == "-p" and v then
                o.patterns[#o.patterns + 1] = v
            else
                return nil
            end
            i = i + 2
        end
    end
    if #o.channels + #o.patterns == 0 then return nil end
    return o
end

local function say(...)
    io.stdout:write(table.concat({ ... }, "\n"), "\n")
    io.stdout:flush() -- each line as it comes, also into a pipe
end

local subscribed = 0
local function confirmed(kind, names)
    for _, name in ipairs(names) do
        subscribed = subscribed + 1
        say(kind, name, subscribed)
    end
end

-- A subscriber to o's channels and patterns (each call returns once Redis
-- confirmed every name in it), or nil and why.
local function subscribe(o)
    local r = mf.redis(o.url)
    local sub, err
    if #o.channels > 0 then
        sub, err = r:subscribe(unpack(o.channels))
        if not sub then return nil, err end
        confirmed("subscribe", o.channels)
    end
    if #o.patterns > 0 then
        if sub then
            local ok, perr = sub:psubscribe(unpack(o.patterns))
            if not ok then return nil, perr end
        else
            sub, err = r:psubscribe(unpack(o.patterns))
            if not sub then return nil, err end
        end
        confirmed("psubscribe", o.patterns)
    end
    return sub
end

-- The main chunk's number is moonflow's exit status.
local o = parse_args({ ... })
if not o then
    io.stderr:write(USAGE)
    return 2
end
local sub, err = subscribe(o)
if not sub then
    io.stderr:write(("redis_subscriber: %s: %s\n"):format(o.url, err))
    return 1
end
local seen = 0
while not o.count or seen < o.count do
    local msg, why = sub:next()
    if not msg then
        io.stderr:write("redis_subscriber: the subscription ended: ", why, "\n")
        return 1
    end
    if msg.kind == "pmessage" then
        say("pmessage", msg.pattern, msg.channel, msg.payload)
    else
        say("message", msg.channel, msg.payload)
    end
    seen = seen + 1
end
sub:close()
