-- A DNS client on moonflow:
--   moonflow run examples/dns_cli/dns_cli.lua NAME [NAME...]
--
-- Resolves every NAME side by side with the loop's resolver (c-ares: the
-- system's /etc/hosts and resolv.conf, answers cached), one mf.task.dns
-- each in an mf.parallel, then prints one line per address, in the order
-- the names were given: the name, a tab, the address (IPv4 first). A name
-- that does not resolve prints "NAME<tab>failed<tab>REASON". Exit status:
-- 0 when every name resolved, 1 otherwise, 2 for a usage error.
local mf = require "moonflow"

local names = { ... }
if #names == 0 then
    io.stderr:write("usage: moonflow run examples/dns_cli/dns_cli.lua NAME [NAME...]\n")
    return 2 -- the main chunk's number is moonflow's exit status
end

local lookups = {}
for i, name in ipairs(names) do
    lookups[i] = mf.task.dns(name, { timeout = 10000 })
end
local results = mf.parallel(lookups):wait()

local failed = false
for i, res in ipairs(results) do
    if res.state == "success" then
        for _, addr in ipairs(res.addresses) do
            print(names[i] .. "\t" .. addr)
        end
    else
        print(("%s\tfailed\t%s"):format(names[i], res.error or res.state))
        failed = true
    end
end
return failed and 1 or 0
