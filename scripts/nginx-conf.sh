# Sourced by the benchmark scripts: the reference nginx they measure
# against, configured once so that every comparison is with the same nginx.
#
#   nginx_conf DIR HTTP_LISTEN HTTP_UPSTREAM [GRPC_LISTEN GRPC_UPSTREAM]
#
# writes DIR/nginx.conf: 2 workers, no logging, upstream keep-alive, bodies
# of any size kept in memory up to 32 MiB; HTTP/1.1 forwarding, and gRPC
# (HTTP/2 cleartext) when the last two are given. Run it with
#   nginx -p DIR -e DIR/error.log -c DIR/nginx.conf
nginx_conf() {
  local dir=$1 http_listen=$2 http_up=$3 grpc_listen=${4:-} grpc_up=${5:-}
  local user_line="" grpc_up_line="" grpc_server=""
  if [ "$(id -u)" = 0 ]; then user_line="user root;"; fi
  if [ -n "$grpc_listen" ]; then
    grpc_up_line="upstream ms_grpc { server $grpc_up; keepalive 64; }"
    grpc_server="server {  # gRPC: HTTP/2 cleartext
    listen $grpc_listen http2;
    http2_max_concurrent_streams 1024;
    location / {
      grpc_pass grpc://ms_grpc;
      grpc_buffer_size 1m;
      grpc_read_timeout 60s;
      grpc_send_timeout 60s;
    }
  }"
  fi
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<CONF
# Reference proxy: plain forwarding, no logging, upstream keep-alive.
worker_processes 2;
daemon off;
$user_line
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  client_max_body_size 0;       # no limit, like the sidecar's 2 GiB default
  client_body_buffer_size 32m;  # 16 MiB messages stay in memory
  keepalive_requests 1000000;
  upstream ms_http { server $http_up; keepalive 64; }
  $grpc_up_line
  $grpc_server
  server {  # HTTP/1.1 KServe v2 REST
    listen $http_listen;
    location / {
      proxy_pass http://ms_http;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffer_size 64k;
      proxy_buffers 16 64k;
      proxy_read_timeout 60s;
    }
  }
}
CONF
}
