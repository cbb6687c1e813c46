-- POST /transfer {"from":..,"to":..,"amount":N}: moves N from one account
-- to another in one transaction (db:transaction): both rows change, or
-- neither does.
--
--   200 {"from":{"name":..,"balance":..},"to":{..}}   the balances after
--   404 an account does not exist, 409 not enough on "from",
--   400 bad input, 500 (logged) a database failure
local mf = require "moonflow"
local site = require "_db"

-- Runs inside the transaction; returns the new balances, or false and a
-- refusal {status, message} (the transaction then rolls back). A query
-- error raises: the transaction rolls back and db:transaction returns it.
local function move(tx, from, to, amount)
    local function q(sql, ...)
        local res, err = tx:query(sql, ...)
        if not res then error(err, 0) end
        return res
    end
    -- Both rows locked in name order: two opposite transfers cannot deadlock.
    local rows = q("SELECT name, balance FROM accounts WHERE name IN (?, ?) "
        .. "ORDER BY name FOR UPDATE", from, to)
    local balance = {}
    for _, row in ipairs(rows) do balance[row.name] = row.balance end
    if not balance[from] or not balance[to] then
        return false, { 404, "no such account" }
    end
    if balance[from] < amount then return false, { 409, "insufficient funds" } end
    q("UPDATE accounts SET balance = balance - ? WHERE name = ?", amount, from)
    q("UPDATE accounts SET balance = balance + ? WHERE name = ?", amount, to)
    return { from = { name = from, balance = balance[from] - amount },
             to = { name = to, balance = balance[to] + amount } }
end

return function(req, resp)
    if req.method ~= "POST" then
        resp.headers["Allow"] = "POST"
        return site.fail(resp, 405, "POST")
    end
    local t = mf.json.decode(req.body or "")
    local amount = type(t) == "table" and site.positive_int(t.amount)
    if not amount or type(t.from) ~= "string" or type(t.to) ~= "string"
        or t.from == t.to then
        return site.fail(resp, 400,
            'a JSON object {"from": "..", "to": "..", "amount": N}, two accounts')
    end
    local ok, result = site.db():transaction(move, t.from, t.to, amount)
    if ok then return resp:json(result) end
    if type(result) == "table" then return site.fail(resp, result[1], result[2]) end
    site.failed(req, resp, result)
end
