-- moonflow.ngx.time — OpenResty's clock and date calls for moonflow.ngx:
-- ngx.now (seconds since the epoch, to the millisecond, of the loop's
-- cached time), ngx.time,
-- ngx.update_time, ngx.today, ngx.localtime, ngx.utctime, ngx.http_time,
-- ngx.cookie_time, ngx.parse_http_time. Installed into the ngx table given.
local floor, date, tonumber = math.floor, os.date, tonumber

-- The loop's time on the wall clock, in ms (moonflow.core): cached at
-- each turn of the loop, as nginx's is, so that it agrees with timers and
-- sleeps; ngx.update_time makes the loop read its clock at once.
local core = require "moonflow.core"
local loop_ms, update_time = core.now, core.update_time

-- The same for the whole turn: computed once per value of the loop's
-- time (the two clocks it is made of are read one after the other, and a
-- millisecond boundary between the reads must not move it).
local last_loop, last_epoch
local function epoch_ms()
    local now = loop_ms()
    if now ~= last_loop then
        last_loop, last_epoch = now, core.epoch_ms()
    end
    return last_epoch
end

local WEEKDAYS = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" }
local MONTHS = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                 "Nov", "Dec" }
local MONTH_NUMBER = {}
for i, m in ipairs(MONTHS) do MONTH_NUMBER[m] = i end

-- Days from 1970-01-01 to the civil date (proleptic Gregorian).
local function days_from_civil(y, m, d)
    if m <= 2 then y = y - 1 end
    local era = floor(y / 400)
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end

local function check_seconds(what, sec)
    if type(sec) ~= "number" then
        error(what .. ": a number of seconds expected, got " .. type(sec), 3)
    end
    return floor(sec)
end

return function(ngx)
    function ngx.now() return epoch_ms() / 1000 end
    function ngx.time() return floor(epoch_ms() / 1000) end
    ngx.update_time = update_time
    function ngx.today() return date("%Y-%m-%d", ngx.time()) end
    function ngx.localtime() return date("%Y-%m-%d %H:%M:%S", ngx.time()) end
    function ngx.utctime() return date("!%Y-%m-%d %H:%M:%S", ngx.time()) end

    -- "Thu, 18 Nov 2010 11:27:35 GMT" (day and month names in English,
    -- whatever the locale).
    function ngx.http_time(sec)
        local t = date("!*t", check_seconds("ngx.http_time", sec))
        return ("%s, %02d %s %04d %02d:%02d:%02d GMT"):format(WEEKDAYS[t.wday], t.day,
            MONTHS[t.month], t.year, t.hour, t.min, t.sec)
    end

    -- "Thu, 18-Nov-10 11:27:35 GMT": two digits of the year up to 2037,
    -- as nginx writes it (old clients read no more), four after.
    function ngx.cookie_time(sec)
        local t = date("!*t", check_seconds("ngx.cookie_time", sec))
        local year = t.year > 2037 and ("%d"):format(t.year) or ("%02d"):format(t.year % 100)
        return ("%s, %02d-%s-%s %02d:%02d:%02d GMT"):format(WEEKDAYS[t.wday], t.day,
            MONTHS[t.month], year, t.hour, t.min, t.sec)
    end

    -- The three forms of RFC 9110 §5.6.7 (IMF-fixdate, RFC 850, asctime),
    -- as nginx's parser takes them; nil for anything else.
    function ngx.parse_http_time(s)
        if type(s) ~= "string" then
            error("ngx.parse_http_time: a string expected, got " .. type(s), 2)
        end
        local d, mon, y, hh, mm, ss =
            s:match("^%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
        if not d then
            d, mon, y, hh, mm, ss =
                s:match("^%a+, (%d%d)%-(%a%a%a)%-(%d%d%d?%d?) (%d%d):(%d%d):(%d%d) GMT$")
            if y and #y == 2 then
                y = tonumber(y)
                y = y < 70 and 2000 + y or 1900 + y
            elseif y and #y ~= 4 then
                d = nil
            end
        end
        if not d then
            mon, d, hh, mm, ss, y = s:match("^%a+ (%a%a%a) +(%d%d?) (%d%d):(%d%d):(%d%d) (%d%d%d%d)$")
        end
        local m = mon and MONTH_NUMBER[mon]
        if not m then return nil end
        d, y, hh, mm, ss = tonumber(d), tonumber(y), tonumber(hh), tonumber(mm), tonumber(ss)
        if d < 1 or d > 31 or hh > 23 or mm > 59 or ss > 59 then return nil end
        return days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss
    end
end
