-- A small Kafka client on moonflow, in the manner of kcat:
--
--   moonflow run examples/kafka_cli/kafka_cli.lua [-b BROKERS] [-X PROP=VALUE]... MODE ...
--     produce  -t TOPIC [-p PARTITION] [-K DELIM] [MESSAGE...]
--     consume  -t TOPIC [-c COUNT] [-e] [-f FORMAT] [-w MS]
--     metadata [-t TOPIC]
--
-- produce sends each MESSAGE, or each line of stdin, as one message (with
-- -K DELIM, "key<DELIM>value"; without it no key) through
-- mf.task.kafka_produce steps, up to 1,000 in flight, and waits for every
-- delivery report; it prints nothing, and raises at the first failure
-- (moonflow prints the error and exits 1). A bad command line prints why
-- and the usage on stderr, exit status 2. consume reads TOPIC from the
-- beginning (a group of its own, no offset committed) and prints each
-- message with FORMAT (default "%s\n"): %t topic, %p partition, %o offset,
-- %k key, %s value, %S value bytes, %T timestamp (ms), %% a %, and the
-- escapes \n \t \r \\; it stops after COUNT messages, or with -e once no
-- message came for -w MS (default 3000) since the group assigned it the
-- topic's partitions (joining takes seconds; up to 30 s are allowed).
-- metadata prints the cluster's brokers, topics, partitions, leaders,
-- replicas and in-sync replicas in kcat -L's layout (its first line names
-- the controller, where kcat names the broker that answered). BROKERS
-- defaults to $KAFKA_BROKERS, else 127.0.0.1:9092; -X passes any
-- librdkafka property.
local mf = require "moonflow"

local usage = [==[
usage: kafka_cli.lua [-b BROKERS] [-X PROP=VALUE]... MODE ...
  produce  -t TOPIC [-p PARTITION] [-K DELIM] [MESSAGE...]
  consume  -t TOPIC [-c COUNT] [-e] [-f FORMAT] [-w MS]
  metadata [-t TOPIC]]==]

local IN_FLIGHT = 1000

-- ---- the command line ----------------------------------------------------

-- A failure once the client is open: raised, so moonflow closes the
-- client (its delivery reports and threads) and exits 1 with the message
-- and a traceback on stderr.
local function fail(msg)
    error("kafka_cli: " .. msg, 0)
end

-- A bad command line, found before anything is opened: raised as a
-- value of its own, which the main chunk turns into the message and the
-- usage on stderr and exit status 2, without a traceback.
local BAD_USAGE = {}

local function usage_error(msg)
    error(setmetatable({ msg = msg }, BAD_USAGE))
end

-- A group id no other run shares: this process's id and the time.
local function own_group()
    local f = io.open("/proc/self/stat")
    local pid = f and f:read("*n") or 0
    if f then f:close() end
    return ("kafka_cli-%d-%d"):format(pid, os.time())
end

local VALUED = { b = true, X = true, t = true, p = true, K = true, c = true, f = true, w = true }

local function parse_args(argv)
    local o = { props = {}, rest = {} }
    local i = 1
    while argv[i] do
        local a = argv[i]
        local flag = a:match("^%-(%a)$")
        if flag and VALUED[flag] then
            local v = argv[i + 1] or usage_error("-" .. flag .. " needs a value")
            if flag == "X" then
                local name, value = v:match("^([^=]+)=(.*)$")
                if not name then usage_error("-X " .. v .. ": PROP=VALUE expected") end
                o.props[name] = value
            else
                o[flag] = v
            end
            i = i + 2
        elseif a == "-e" then
            o.e, i = true, i + 1
        elseif flag then
            usage_error("unknown option " .. a)
        elseif not o.mode then
            o.mode, i = a, i + 1
        else
            o.rest[#o.rest + 1], i = a, i + 1
        end
    end
    return o
end

local function number_opt(o, flag, default, min)
    local v = o[flag]
    if v == nil then return default end
    local n = tonumber(v)
    if not n or n ~= math.floor(n) or n < min then
        usage_error(("-%s %s: an integer of at least %d expected"):format(flag, v, min))
    end
    return n
end

local function open(o)
    local conf = { ["bootstrap.servers"] = o.b or os.getenv("KAFKA_BROKERS") or "127.0.0.1:9092" }
    for name, value in pairs(o.props) do conf[name] = value end
    return mf.kafka(conf)
end

-- ---- produce -------------------------------------------------------------

local function message_of(o, text, partition)
    local m = { topic = o.t, value = text, partition = partition }
    if o.K then
        local at = text:find(o.K, 1)
        if at then m.key, m.value = text:sub(1, at - 1), text:sub(at + #o.K) end
    end
    return m
end

-- Sends the collected messages side by side; raises at the first failure.
local function send(k, batch)
    if #batch == 0 then return end
    local steps = {}
    for i, m in ipairs(batch) do steps[i] = mf.task.kafka_produce(k, m) end
    local results = mf.parallel(steps):wait()
    for i, r in ipairs(results) do
        if r.state ~= "success" then
            fail(("produce %q: %s"):format(batch[i].value or "", tostring(r.error or r.state)))
        end
    end
end

local function check_produce(o)
    if not o.t then usage_error("produce: -t TOPIC is required") end
    o.partition = number_opt(o, "p", nil, 0)
end

local function produce(o)
    local partition = o.partition
    local k = open(o)
    local batch = {}
    local function add(text)
        batch[#batch + 1] = message_of(o, text, partition)
        if #batch == IN_FLIGHT then
            send(k, batch)
            batch = {}
        end
    end
    if #o.rest > 0 then
        for _, text in ipairs(o.rest) do add(text) end
    else
        for line in io.lines() do add(line) end
    end
    send(k, batch)
end

-- ---- consume -------------------------------------------------------------

local ESCAPES = { n = "\n", t = "\t", r = "\r", ["\\"] = "\\" }

-- FORMAT as a list of literal strings and one-letter fields.
local function compile_format(f)
    local parts, i = {}, 1
    while i <= #f do
        local c = f:sub(i, i)
        if c == "%" then
            local field = f:sub(i + 1, i + 1)
            if field == "%" then
                parts[#parts + 1] = "%"
            elseif field:match("^[tpokSsT]$") then
                parts[#parts + 1] = { field }
            else
                usage_error("-f: unknown field %" .. field .. " (%t %p %o %k %s %S %T %%)")
            end
            i = i + 2
        elseif c == "\\" and ESCAPES[f:sub(i + 1, i + 1)] then
            parts[#parts + 1] = ESCAPES[f:sub(i + 1, i + 1)]
            i = i + 2
        else
            parts[#parts + 1] = c
            i = i + 1
        end
    end
    return parts
end

local FIELDS = {
    t = function(m) return m.topic end,
    p = function(m) return tostring(m.partition) end,
    o = function(m) return ("%.0f"):format(m.offset) end,
    k = function(m) return m.key or "" end,
    s = function(m) return m.value or "" end,
    S = function(m) return tostring(m.value and #m.value or -1) end,
    T = function(m) return m.timestamp and ("%.0f"):format(m.timestamp) or "-1" end,
}

local function render(parts, m, out)
    for _, p in ipairs(parts) do
        out[#out + 1] = type(p) == "table" and FIELDS[p[1]](m) or p
    end
end

-- With -e, how long the group may take to assign partitions before the
-- idle wait (-w) starts counting (the join alone takes seconds).
local JOIN_MS = 30000

-- Prints messages until COUNT (true), or until idle for wait_ms (false).
local function print_messages(c, parts, count, wait_ms, n)
    for m in c:messages(wait_ms) do
        local out = {}
        render(parts, m, out)
        io.write(table.concat(out))
        n = n + 1
        if count and n >= count then return true, n end
    end
    return false, n
end

local function check_consume(o)
    if not o.t then usage_error("consume: -t TOPIC is required") end
    o.count = number_opt(o, "c", nil, 1)
    if not o.count and not o.e then usage_error("consume: -c COUNT or -e is required") end
    o.wait_ms = o.e and number_opt(o, "w", 3000, 1) or nil
    o.parts = compile_format(o.f or "%s\\n")
end

local function consume(o)
    local count, wait_ms, parts = o.count, o.wait_ms, o.parts
    local assigned_at -- mf.now() of the first assignment
    local c = open(o):consumer {
        group = own_group(),
        topics = { o.t },
        on_assign = function() assigned_at = assigned_at or mf.now() end,
        ["auto.offset.reset"] = "earliest",
        ["enable.auto.commit"] = "false",
    }
    local join_by, n, done = mf.now() + JOIN_MS, 0, false
    -- An idle wait that began before the assignment does not count.
    repeat
        done, n = print_messages(c, parts, count, wait_ms, n)
    until done or (assigned_at and assigned_at <= mf.now() - wait_ms) or mf.now() > join_by
    io.stdout:flush()
    c:close()
    if count and n < count then fail(("consume: %d of %d messages"):format(n, count)) end
end

-- ---- metadata ------------------------------------------------------------

local function ids(list)
    local s = {}
    for i, id in ipairs(list) do s[i] = tostring(id) end
    return table.concat(s, ",")
end

local function words(err)
    return (err:gsub("^kafka [%w_]+: ", ""))
end

local function metadata(o)
    local md, err = open(o):metadata(o.t)
    if not md then fail("metadata: " .. err) end
    local out = {}
    local function say(...) out[#out + 1] = table.concat({ ... }) end
    say(("Metadata for %s (controller %d):"):format(o.t or "all topics", md.controller))
    local brokers = md.brokers
    table.sort(brokers, function(a, b) return a.id < b.id end)
    say((" %d brokers:"):format(#brokers))
    for _, b in ipairs(brokers) do say(("  broker %d at %s:%d"):format(b.id, b.host, b.port)) end
    local names = {}
    for name in pairs(md.topics) do names[#names + 1] = name end
    table.sort(names)
    say((" %d topics:"):format(#names))
    for _, name in ipairs(names) do
        local t = md.topics[name]
        local line = ('  topic "%s" with %d partitions:'):format(name, #t.partitions)
        if t.error then line = line .. " " .. words(t.error) end
        say(line)
        for _, p in ipairs(t.partitions) do
            say(("    partition %d, leader %d, replicas: %s, isrs: %s"):format(
                p.id, p.leader, ids(p.replicas), ids(p.isrs)))
        end
    end
    io.write(table.concat(out, "\n"), "\n")
end

local MODES = {
    produce = { check = check_produce, run = produce },
    consume = { check = check_consume, run = consume },
    metadata = { run = metadata },
}

-- The mode and its options, every check made before anything is opened.
local function command_line(argv)
    local o = parse_args(argv)
    local mode = MODES[o.mode or ""]
        or usage_error(o.mode and "unknown mode " .. o.mode or "a MODE is required")
    if mode.check then mode.check(o) end
    return mode.run, o
end

local ok, run, o = pcall(command_line, arg)
if not ok then
    if getmetatable(run) ~= BAD_USAGE then error(run, 0) end
    io.stderr:write("kafka_cli: ", run.msg, "\n", usage, "\n")
    return 2 -- the main chunk's number is moonflow's exit status
end
run(o)
