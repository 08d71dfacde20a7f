{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"secrets \"probe-record\" not found","reason":"NotFound","details":{"name":"probe-record","kind":"secrets"},"code":404}
