return function(req, resp)
    resp:send("api index")
end
