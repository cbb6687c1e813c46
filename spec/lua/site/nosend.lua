-- Returns without sending: the answer carries the status that was set.
return function(req, resp)
    resp.status = 204
end
