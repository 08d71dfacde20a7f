{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"probe-copy","group":"batch","kind":"jobs","uid":"a9cde635-9cac-4c51-8201-280ef1951fa8"}}
